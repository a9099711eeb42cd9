//! The demo's sessions: bounded in number and in age, so repeated sign-ins cannot grow
//! memory without bound and a stolen cookie stops working.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A signed-in user of the demo: the organization they act for, their CSRF token, and when
/// they signed in.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) organization_id: String,
    pub(crate) csrf_token: String,
    pub(crate) created: Instant,
}

/// The demo's sessions by id, bounded in number and in age.
#[derive(Debug)]
pub(crate) struct Sessions {
    by_id: HashMap<String, Session>,
    lifetime: Duration,
    capacity: usize,
}

impl Sessions {
    pub(crate) fn new(lifetime: Duration, capacity: usize) -> Self {
        Self {
            by_id: HashMap::new(),
            lifetime,
            capacity: capacity.max(1),
        }
    }

    fn expired(&self, session: &Session, now: Instant) -> bool {
        now.saturating_duration_since(session.created) >= self.lifetime
    }

    /// The live session `id`; an expired one is removed, and the user is signed out.
    pub(crate) fn get(&mut self, id: &str, now: Instant) -> Option<Session> {
        let session = self.by_id.get(id)?;
        if self.expired(session, now) {
            self.by_id.remove(id);
            return None;
        }
        Some(session.clone())
    }

    /// Adds a session; when full, expired sessions go first, then the oldest. (A scan of
    /// the store, only when it is full: fine for a demo's bound.)
    pub(crate) fn insert(&mut self, id: String, session: Session, now: Instant) {
        if self.by_id.len() >= self.capacity {
            let lifetime = self.lifetime;
            self.by_id
                .retain(|_, kept| now.saturating_duration_since(kept.created) < lifetime);
        }
        while self.by_id.len() >= self.capacity {
            let oldest = self
                .by_id
                .iter()
                .min_by_key(|(_, other)| other.created)
                .map(|(oldest, _)| oldest.clone());
            let Some(oldest) = oldest else { break };
            self.by_id.remove(&oldest);
        }
        self.by_id.insert(id, session);
    }

    pub(crate) fn remove(&mut self, id: &str) {
        self.by_id.remove(id);
    }
}
