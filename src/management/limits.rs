//! The limits the management service holds requests to.

use std::time::Duration;

/// The largest request body the service reads.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// The longest overlap a roll may ask for: a year.
pub const MAX_OVERLAP: Duration = Duration::from_secs(366 * 24 * 3600);

/// The longest lifetime a roll may give a key: a hundred years.
pub const MAX_LIFETIME: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The default budget of changes (every `POST`: issuing, revoking, rolling, restricting keys,
/// setting the policy, and every webhook change), per organization: bursts of 30, then one a
/// second. Each change writes an audit entry, so this bounds how fast a tenant grows the log.
pub const DEFAULT_MANAGEMENT_WRITES: (std::time::Duration, std::num::NonZeroU32) = (
    std::time::Duration::from_secs(1),
    match std::num::NonZeroU32::new(30) {
        Some(burst) => burst,
        None => unreachable!(),
    },
);

/// The default budget of webhook actions that queue messages (`test`, `retry`, `recover`),
/// per organization: bursts of 10, then one every 6 seconds.
#[cfg(feature = "webhooks")]
pub const DEFAULT_WEBHOOK_ACTIONS: (std::time::Duration, std::num::NonZeroU32) = (
    std::time::Duration::from_secs(6),
    match std::num::NonZeroU32::new(10) {
        Some(burst) => burst,
        None => unreachable!(),
    },
);
