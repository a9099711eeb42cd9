//! Leaked keys: what a secret-scanning report tells of a key, and why a key was revoked.

use serde::{Serialize, Serializer};

use crate::key::KeyDigest;
use crate::model::Timestamp;

use super::KeyRecord;

/// Why a key was revoked: `"manual"` (by its organization, an operator, or plain SQL),
/// `"leaked"` (found in public by a secret scanner, see [`KeyManager::revoke_leaked`]) or
/// `"rolled"` (replaced by a roll without overlap, see [`KeyManager::roll`]).
///
/// [`KeyManager::revoke_leaked`]: super::KeyManager::revoke_leaked
/// [`KeyManager::roll`]: super::KeyManager::roll
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RevocationReason {
    /// Revoked by a person or a program through [`KeyManager::revoke`](super::KeyManager::revoke).
    Manual,
    /// Revoked because a secret scanner found it in public.
    Leaked,
    /// Ended by a roll without overlap: replaced by the roll's new key at once.
    Rolled,
}

impl RevocationReason {
    /// Returns the reason's name: `manual`, `leaked` or `rolled`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Leaked => "leaked",
            Self::Rolled => "rolled",
        }
    }
}

impl Serialize for RevocationReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Where a leaked key was found, as the secret scanner reported it. Serializes as
/// `{"url", "source", "reportedAt"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Leak {
    /// The public address of the content that holds the key (empty when the scanner gave
    /// none).
    pub url: String,
    /// Where the scanner found it (GitHub says `content`, `commit`, `issue_comment`, ...).
    pub source: String,
    /// When the report arrived.
    pub reported_at: Timestamp,
}

/// One key a secret scanner reported, by its digest: the plaintext goes no further than the
/// endpoint that received the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeakReport {
    /// The SHA-256 digest of the reported token.
    pub digest: KeyDigest,
    /// Where it was found.
    pub leak: Leak,
}

/// A reported key a store knows, after [`KeyManager::revoke_leaked`](super::KeyManager::revoke_leaked).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeakedKey {
    /// The key's record, revoked.
    pub record: KeyRecord,
    /// Whether this report is the first of the key's leak (so the organization is told once,
    /// however often the scanner sends the same match).
    pub first_report: bool,
}

impl LeakedKey {
    /// Pairs a reported key's record with whether this was its first report.
    pub fn new(record: KeyRecord, first_report: bool) -> Self {
        Self {
            record,
            first_report,
        }
    }
}
