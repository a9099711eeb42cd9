//! The hashers of the crate's maps on the request path, for keys that no caller chooses:
//! [`Prehashed`] for keys that are hashes already, [`OneShotXxh3`] for ids from a store.

use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

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

/// A hasher for ids that came from a store (a key id): XXH3 over each written piece at once.
/// `Xxh3` as a `Hasher` streams into a buffer and finishes from it, several times the cost of
/// one call for a short id; ids come from a store, never from a client, so nobody can choose
/// them to collide.
///
/// For maps keyed by text only: `write_u8` is the terminator a `str` writes after its bytes
/// and is not hashed, so a `u8`, `i8` or `bool` in a key would not be either.
#[derive(Clone, Copy, Default)]
pub(crate) struct OneShotXxh3(u64);

/// A map's hasher builder of [`OneShotXxh3`].
pub(crate) type BuildOneShotXxh3 = BuildHasherDefault<OneShotXxh3>;

impl Hasher for OneShotXxh3 {
    fn finish(&self) -> u64 {
        self.0
    }

    // Each piece seeds the next, so a key written in pieces hashes them all, in order.
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxh3_64_with_seed(bytes, self.0);
    }

    // The terminator a `str` writes after its bytes: their length says as much.
    fn write_u8(&mut self, _terminator: u8) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn one_shot_xxh3_tells_ids_apart_and_hashes_every_piece() {
        let build = BuildOneShotXxh3::default();
        let hash = |id: &str| build.hash_one(id);
        assert_eq!(hash("key_1"), hash("key_1"));
        assert_ne!(hash("key_1"), hash("key_2"));
        assert_ne!(hash(""), hash("key_1"));
        // Pieces hashed in order, each into the next.
        assert_ne!(build.hash_one(("ab", "c")), build.hash_one(("a", "bc")));
        assert_eq!(hash("key_1"), xxh3_64_with_seed(b"key_1", 0));
    }
}
