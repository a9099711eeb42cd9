//! What one delivery worker has in flight, per endpoint and per organization: the counts its
//! claims leave room by, kept right by a guard that leaves them when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::Delivery;

/// The deliveries this worker has in flight, per endpoint and per organization.
#[derive(Default)]
pub(super) struct InFlightCounts {
    pub(super) endpoints: HashMap<String, usize>,
    pub(super) organizations: HashMap<String, usize>,
    /// Those to endpoints whose deliveries fail.
    pub(super) failing: usize,
}

/// One delivery in flight to an endpoint of an organization, counted until dropped (a
/// panicking attempt included).
pub(super) struct InFlight {
    counts: Arc<Mutex<InFlightCounts>>,
    endpoint_id: String,
    organization_id: String,
    failing: bool,
}

impl InFlight {
    pub(super) fn enter(counts: &Arc<Mutex<InFlightCounts>>, delivery: &Delivery) -> Self {
        let failing = delivery.failing_since.is_some();
        let mut held = counts.lock().unwrap_or_else(PoisonError::into_inner);
        *held
            .endpoints
            .entry(delivery.endpoint_id.clone())
            .or_default() += 1;
        *held
            .organizations
            .entry(delivery.organization_id.clone())
            .or_default() += 1;
        held.failing += usize::from(failing);
        Self {
            counts: Arc::clone(counts),
            endpoint_id: delivery.endpoint_id.clone(),
            organization_id: delivery.organization_id.clone(),
            failing,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let leave = |map: &mut HashMap<String, usize>, id: &str| {
            if let Some(count) = map.get_mut(id) {
                *count -= 1;
                if *count == 0 {
                    map.remove(id);
                }
            }
        };
        leave(&mut counts.endpoints, &self.endpoint_id);
        leave(&mut counts.organizations, &self.organization_id);
        counts.failing -= usize::from(self.failing);
    }
}
