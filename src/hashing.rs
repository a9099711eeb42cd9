//! The hashers of the crate's maps on the request path, for keys that no caller chooses:
//! [`Prehashed`] for keys that are hashes already, [`OneShotXxh3`] for ids from a store; and
//! [`mix64`] for the slots of the worker threads' small tables.

use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// `value` with every bit mixed into every bit of the result (MurmurHash3's 64-bit
/// finalizer), for a table indexed by the result's top bits: a plain multiply by a constant
/// maps some strides to few slots (1,000 addresses 96 bytes apart to 90 distinct slots of
/// 8,192, where this gives about 880, as a random hash does).
pub(crate) const fn mix64(mut value: u64) -> u64 {
    value ^= value >> 33;
    value = value.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    value ^= value >> 33;
    value = value.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    value ^ (value >> 33)
}

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
    fn mixed_addresses_at_any_stride_spread_over_the_slots_as_random_ones_do() {
        // 1,000 objects at a regular stride into 8,192 slots by the top 13 bits: a random
        // hash leaves about 885 alone in their slot; a multiply by the golden ratio leaves
        // 90 at a stride of 96 bytes.
        for stride in [16_u64, 48, 64, 96, 128, 160, 192, 256, 4096] {
            let slots: Vec<u64> = (0..1_000)
                .map(|n| mix64(0x5555_0000_1000 + n * stride) >> 51)
                .collect();
            let alone = slots
                .iter()
                .filter(|slot| slots.iter().filter(|other| other == slot).count() == 1)
                .count();
            assert!(alone >= 840, "stride {stride}: {alone} alone");
        }
    }

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
