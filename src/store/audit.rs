//! The audit log: every change made through the crate (a key issued, rolled, revoked,
//! restricted; a policy set; a webhook endpoint added, rotated, enabled, disabled, removed,
//! tested; messages retried or recovered), with who made it, from where and when.
//!
//! A store that keeps the log ([`AuditLog`]) writes each entry in the same transaction as its
//! change, so a change and its entry commit together or not at all. Who made a change comes
//! from the caller, never from a request body: the caller runs the store call inside
//! [`AuditContext::scope`] (the management service does, with the actor its host tells it;
//! the standalone host's commands do, as `cli:<user>`), and the store reads
//! [`AuditContext::current`]. A change made without a context is logged as [`UNATTRIBUTED`].
//! The crate's automatic changes have actors of their own, whatever the context: an endpoint
//! that webhook delivery disables (it answered 410 Gone, or failed for the disable period) is
//! logged as `webhook.disabled` by [`DELIVERY_ACTOR`], with the reason (`gone` or `failing`)
//! as the entry's detail, and a key a leak report revoked as `key.leaked` by
//! [`SECRET_SCANNING_ACTOR`]. Changes made outside the crate (plain
//! SQL) are not logged; a host that wants them in one log inserts its own entries
//! ([`AuditLog::append`], or an `INSERT` into `partner_api_audit_log`).

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::model::Timestamp;
use crate::store::StoreError;

mod action;

pub use action::AuditAction;

/// How long audit entries are kept, by default: 400 days.
pub const DEFAULT_AUDIT_RETENTION: Duration = Duration::from_secs(400 * 24 * 3600);

/// The actor of the `audit.pruned` entries that the audit log's retention writes
/// ([`Maintenance::with_audit_retention`](crate::maintenance::Maintenance::with_audit_retention)).
pub const AUDIT_RETENTION_ACTOR: &str = "audit retention";
/// The actor of a change made without an [`AuditContext`].
pub const UNATTRIBUTED: &str = "unattributed";
/// The actor of an endpoint disabled by webhook delivery, whatever context the delivery runs
/// in; the entry's detail is the reason (`gone` or `failing`).
pub const DELIVERY_ACTOR: &str = "webhook delivery";
/// The actor of a key's `key.leaked` entry: revoked by a leak report (GitHub secret scanning),
/// whatever context the report's revocation runs in.
pub const SECRET_SCANNING_ACTOR: &str = "github secret scanning";

/// The actors of the crate's automatic changes: written only by the crate's own code paths
/// (on PostgreSQL, by triggers that run as the owner; an `INSERT` of another role that names
/// one is refused), never by [`AuditLog::append`].
const RESERVED_ACTORS: [&str; 2] = [DELIVERY_ACTOR, SECRET_SCANNING_ACTOR];

/// Why [`AuditLog::append`] refuses `record` in `context`, if it does: a host's own entry has a
/// host action (never one of [`AuditAction::ALL`], which only the crate's changes write) and an
/// actor the crate does not reserve for itself. Every store's `append` checks this first.
pub(crate) fn refuse_host_entry(
    record: &AuditRecord,
    context: &AuditContext,
) -> Option<StoreError> {
    // By its name, as a reader sees it: `Host("key.revoked")` is the crate's `key.revoked`.
    let host_action = record
        .action
        .as_str()
        .parse::<AuditAction>()
        .is_ok_and(|action| matches!(action, AuditAction::Host(_)));
    if !host_action {
        return Some(StoreError::invalid_data(format!(
            "{} is an action of the crate's own: a host appends its own actions (`user.invited`)",
            record.action
        )));
    }
    // Compared as a reader sees them, case and spacing aside (as the database compares them).
    let actor = context
        .actor()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    RESERVED_ACTORS.contains(&actor.as_str()).then(|| {
        StoreError::invalid_data(format!(
            "{:?} is an actor of the crate's own: a host's entry names its own",
            context.actor()
        ))
    })
}

/// The most entries one read returns.
pub const MAX_AUDIT_PAGE: usize = 100;

/// Who makes the changes of a store call, and from where: set by the caller around the call
/// ([`scope`](Self::scope)), read by the store ([`current`](Self::current)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditContext {
    actor: String,
    source_address: Option<String>,
    user_agent: Option<String>,
    request_id: Option<String>,
}

tokio::task_local! {
    static CURRENT: AuditContext;
}

/// The longest actor, user agent or request id kept, in characters.
const MAX_FIELD_CHARS: usize = 200;

fn bounded(text: &str) -> String {
    text.chars().take(MAX_FIELD_CHARS).collect()
}

/// The longest detail kept (a leak report's URL), in characters.
const MAX_DETAIL_CHARS: usize = 2000;

impl AuditContext {
    /// Changes made by `actor` (a user's name or email, `cli:<user>`, a program's name).
    pub fn new(actor: &str) -> Self {
        Self {
            actor: bounded(actor),
            source_address: None,
            user_agent: None,
            request_id: None,
        }
    }

    /// Sets the address the change came from.
    #[must_use]
    pub fn with_source_address(mut self, address: std::net::IpAddr) -> Self {
        self.source_address = Some(address.to_string());
        self
    }

    /// Sets the user agent the change came from.
    #[must_use]
    pub fn with_user_agent(mut self, user_agent: &str) -> Self {
        self.user_agent = Some(bounded(user_agent));
        self
    }

    /// Sets the id of the request that made the change.
    #[must_use]
    pub fn with_request_id(mut self, request_id: &str) -> Self {
        self.request_id = Some(bounded(request_id));
        self
    }

    /// Runs `future` (store calls) with this context: the entries of the changes it makes
    /// name this actor. The context is the task's (a Tokio task-local): a store that makes a
    /// change on a task it spawns carries it there with `AuditContext::current().scope(..)`.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(self, future).await
    }

    /// The context of the running store call: the one set by [`scope`](Self::scope), or
    /// [`UNATTRIBUTED`].
    pub fn current() -> Self {
        CURRENT
            .try_with(Clone::clone)
            .unwrap_or_else(|_| Self::new(UNATTRIBUTED))
    }

    /// This context with `actor` in place of its own: a change the crate makes by itself
    /// inside a caller's call (a leak report's revocation) keeps where it came from.
    pub(crate) fn acting_as(mut self, actor: &str) -> Self {
        self.actor = bounded(actor);
        self
    }

    /// The actor.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// The source address, if known.
    pub fn source_address(&self) -> Option<&str> {
        self.source_address.as_deref()
    }

    /// The user agent, if known.
    pub fn user_agent(&self) -> Option<&str> {
        self.user_agent.as_deref()
    }

    /// The request id, if known.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
}

/// One entry of the log. Never holds a secret or a plaintext key: the target is an id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// The entry's id.
    pub id: String,
    /// When the change was made (by the store's clock).
    pub at: Timestamp,
    /// The organization changed.
    pub organization_id: String,
    /// What the change did.
    pub action: AuditAction,
    /// The key's or endpoint's id, if the change was to one.
    pub target: Option<String>,
    /// More about the change: a leak report's URL, a rolled key's successor, a message's id.
    pub detail: Option<String>,
    /// Who made it.
    pub actor: String,
    /// From which address.
    pub source_address: Option<String>,
    /// With which user agent.
    pub user_agent: Option<String>,
    /// In which request.
    pub request_id: Option<String>,
}

/// What a store writes for a change: the rest comes from [`AuditContext::current`] and the
/// store's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    /// The organization changed.
    pub organization_id: String,
    /// What the change did.
    pub action: AuditAction,
    /// The key's or endpoint's id.
    pub target: Option<String>,
    /// More about the change.
    pub detail: Option<String>,
}

impl AuditRecord {
    /// A change `action` of the organization, to `target`.
    pub fn new(organization_id: &str, action: AuditAction, target: Option<&str>) -> Self {
        Self {
            organization_id: organization_id.to_owned(),
            action,
            target: target.map(str::to_owned),
            detail: None,
        }
    }

    /// Adds a detail.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into().chars().take(MAX_DETAIL_CHARS).collect());
        self
    }
}

/// Where a page of entries starts: after the entry at this time with this id (newest first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPosition {
    /// The last entry's time.
    pub at: Timestamp,
    /// The last entry's id.
    pub id: String,
}

/// A read of the log: newest first, at most `limit` entries (at most [`MAX_AUDIT_PAGE`]),
/// after `after`, only `action` and `target` when given.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AuditQuery {
    /// How many entries, at most.
    pub limit: usize,
    /// Where the page starts.
    pub after: Option<AuditPosition>,
    /// Only entries of this action.
    pub action: Option<AuditAction>,
    /// Only entries of this target.
    pub target: Option<String>,
}

/// A page of entries, newest first, and whether more follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    /// The entries.
    pub entries: Vec<AuditEntry>,
    /// Whether older entries follow.
    pub more: bool,
}

impl AuditPage {
    /// Where the next page starts ([`AuditQuery::after`]): after this page's last entry,
    /// when older entries follow.
    pub fn next_position(&self) -> Option<AuditPosition> {
        let last = self.entries.last().filter(|_| self.more)?;
        Some(AuditPosition {
            at: last.at,
            id: last.id.clone(),
        })
    }
}

/// Keeps the audit log of organizations: a capability of its own, which a host's store may
/// leave out (the management service then answers `/audit` 404 and the Settings page hides
/// the security log).
///
/// A store that keeps it writes an entry for each change its `KeyManager` and
/// `WebhookManager` methods make, in the same transaction, with [`AuditContext::current`].
/// [`MemoryStore`](crate::MemoryStore) and `PgStore` implement it with the same semantics;
/// `testing::run_audit_log` checks any implementation.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Reads a page of the organization's entries, newest first.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization; the store's.
    async fn audit_entries(
        &self,
        organization_id: &str,
        query: &AuditQuery,
    ) -> Result<AuditPage, StoreError>;

    /// Appends an entry of the host's own (a change it made itself), with
    /// [`AuditContext::current`]'s actor. A host's entry is marked as the host's: its action
    /// is one of the host's own ([`AuditAction::Host`]), never one the crate's changes write,
    /// and its actor is not one the crate reserves for its automatic changes
    /// ([`DELIVERY_ACTOR`], [`SECRET_SCANNING_ACTOR`]).
    ///
    /// # Errors
    ///
    /// `InvalidData` for an action or an actor of the crate's own; `NotFound` for an unknown
    /// organization; the store's.
    async fn append(&self, record: AuditRecord) -> Result<(), StoreError>;

    /// Deletes at most `batch` entries older than `older_than` (by the store's clock), oldest
    /// first, and returns how many; each organization that lost entries gets an `audit.pruned`
    /// entry saying how many (with [`AuditContext::current`]'s actor), in the same
    /// transaction, so no deletion leaves no trace. Retention is the only deletion: for
    /// `PgStore`, through the owner's function `partner_api_prune_audit`, which keeps at
    /// least [`DEFAULT_AUDIT_RETENTION`] unless the owner's role calls it.
    ///
    /// # Errors
    ///
    /// The store's.
    async fn prune_audit(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError>;
}

/// Runs `log`'s retention to the end or for at most `batches` batches of `batch` entries,
/// whichever comes first, and returns how many entries it deleted: what a retention task (the
/// management service's, the standalone host's) and the operator's `audit --prune` run.
///
/// # Errors
///
/// The store's, from the batch that failed (the earlier ones stay deleted).
pub async fn prune_audit_batches(
    log: &(impl AuditLog + ?Sized),
    older_than: Duration,
    batch: u32,
    batches: u32,
) -> Result<u64, StoreError> {
    in_batches(batch, batches, || log.prune_audit(older_than, batch)).await
}

/// Runs `round` (which deletes at most `batch` rows) at most `batches` times, until one
/// deletes fewer than `batch`; the total deleted.
pub(crate) async fn in_batches<F, R>(
    batch: u32,
    batches: u32,
    mut round: R,
) -> Result<u64, StoreError>
where
    R: FnMut() -> F,
    F: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut deleted = 0;
    for _ in 0..batches {
        let pruned = round().await?;
        deleted += pruned;
        if pruned < u64::from(batch) {
            break;
        }
    }
    Ok(deleted)
}

/// The detail of a `webhook.added` entry: the URL's scheme, host and port only. A receiver's
/// token often rides in its URL's path or query, and the log keeps entries for 400 days, long
/// after the endpoint and its URL are gone.
#[cfg(feature = "webhooks")]
pub(crate) fn url_origin(url: &str) -> String {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return "(not a URL)".to_owned();
    };
    match (uri.scheme_str(), uri.host()) {
        (Some(scheme), Some(host)) => match uri.port_u16() {
            Some(port) => format!("{scheme}://{host}:{port}"),
            None => format!("{scheme}://{host}"),
        },
        _ => "(not a URL)".to_owned(),
    }
}

/// The detail of a `key.restricted` entry: the ranges, or `any`.
pub(crate) fn restriction(allowed_ips: &crate::key::AllowedIps) -> String {
    if allowed_ips.is_any() {
        return "any".to_owned();
    }
    allowed_ips
        .ranges()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "webhooks")]
    #[test]
    fn a_webhook_url_is_kept_as_its_origin_only() {
        for (url, origin) in [
            (
                "https://hooks.example.com/in/t0ken?secret=abc",
                "https://hooks.example.com",
            ),
            (
                "https://hooks.example.com:8443/x",
                "https://hooks.example.com:8443",
            ),
            ("http://[::1]:9000/path", "http://[::1]:9000"),
            ("https://HOOKS.example.com", "https://HOOKS.example.com"),
            ("no url at all", "(not a URL)"),
        ] {
            assert_eq!(url_origin(url), origin, "{url}");
        }
    }
}
