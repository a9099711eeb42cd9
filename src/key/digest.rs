//! [`KeyDigest`]: what a store sees of a key.

use std::fmt;

use sha2::{Digest, Sha256};

/// The SHA-256 digest of an API key: all a store ever sees of a key.
///
/// Stores persist and index only digests, so a leaked table cannot be replayed as keys. The
/// `Debug` output does not show the bytes, so a digest never ends up in a log by accident.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// Computes the digest of the plaintext key `key`.
    pub fn of(key: &str) -> Self {
        Self::of_bytes(key.as_bytes())
    }

    /// The digest of a key as the header carried it.
    pub(crate) fn of_bytes(key: &[u8]) -> Self {
        Self(Sha256::digest(key).into())
    }

    /// Creates a digest from its 32 bytes, as a store read it back.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Returns the 32 bytes of the digest, as a store persists them.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(<redacted>)")
    }
}
