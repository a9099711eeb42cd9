//! [`Prehashed`]: the hasher of maps whose keys are hashes already.

use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for keys that are uniformly distributed hashes already (a SHA-256 key digest, an
/// XXH3 hash of an id): it keeps the first eight bytes instead of hashing them again. Only
/// for keys that callers cannot choose to collide (digests of keys the host inserted, hashes
/// of ids that came from a store).
#[derive(Clone, Copy, Default)]
pub(crate) struct Prehashed(u64);

/// A map's hasher builder of [`Prehashed`].
pub(crate) type BuildPrehashed = BuildHasherDefault<Prehashed>;

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        match bytes.first_chunk::<8>() {
            Some(head) => self.0 = u64::from_le_bytes(*head),
            None => {
                for &byte in bytes {
                    self.0 = self.0.rotate_left(8) ^ u64::from(byte);
                }
            }
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    // An array hashes its length first: that says nothing about the key.
    fn write_usize(&mut self, _length: usize) {}
}
