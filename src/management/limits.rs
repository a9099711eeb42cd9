//! The limits the management service holds requests to.

use std::time::Duration;

/// The largest request body the service reads.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// The longest overlap a roll may ask for: a year.
pub const MAX_OVERLAP: Duration = Duration::from_secs(366 * 24 * 3600);

/// The longest lifetime a roll may give a key: a hundred years.
pub const MAX_LIFETIME: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
