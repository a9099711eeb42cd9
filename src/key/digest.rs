//! [`KeyDigest`]: what a store sees of a key, and the memo of presented keys' digests.
//!
//! # The memo
//!
//! Every request with a key needs its SHA-256. A partner sends the same key again and again,
//! so each thread keeps a small two-way memo from a **tag** of the presented key to its
//! digest, and a key seen recently on the thread costs one SipHash instead of one SHA-256
//! (about 3,600 instructions in software, which is what a CPU without the SHA extensions runs).
//!
//! The memo is sound because it remembers a pure function: a key's digest never changes, so
//! an entry is never stale, whatever happens to the key (revocation is the key caches'
//! business, and they are asked with the digest as before). What could go wrong is a *wrong*
//! entry: another token with the same tag would be taken for the memoised key. The tag is
//! SipHash-2-4 with a 128-bit output under a random key drawn per thread, a pseudorandom
//! function: without that key nobody can compute tags offline, and online a forgery succeeds
//! with probability 2^-127 per attempt (one of the 128 bits is set to mark used entries). The memo stores no plaintext, only tags and digests,
//! which say no more than the stores' digests do. It is bounded (4,096 entries, 192 KiB per
//! thread, allocated on the thread's first key); tokens flooding it only evict entries, which
//! then cost a SHA-256 again, as without the memo. Tokens longer than a generated key's
//! ordinary length plus margin skip it.
//!
//! Two ways: a tag's bits pick a set of two entries, the one used last first. A host's keys
//! taking turns on a thread (1,000 partners, say) then rarely evict each other: a key is
//! evicted only when two others of its set came after it, where a direct-mapped table of as
//! many entries evicts it at the first other key of its slot (at 1,000 keys in turn, about 91
//! in 100 found against 78).
//!
//! Only tokens that [`check_presented`] accepts go in, so a token found in the memo is not
//! checked again: the check is a pure function of the token's bytes (a grammar and a
//! checksum), and it accepted these bytes when they went in.

use std::cell::RefCell;
use std::fmt;

use sha2::{Digest, Sha256};
use siphasher::sip128::SipHasher24;

use super::{check_presented, TokenFault};

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

    /// The digest of a token as the header carried it, if [`check_presented`] accepts it,
    /// from the thread's memo when the token was presented on this thread recently (see the
    /// module's documentation). A memoised token is not checked again: only accepted tokens
    /// go in, and the check is a pure function of the bytes.
    pub(crate) fn of_presented(key: &[u8]) -> Result<Self, TokenFault> {
        let checked = || check_presented(key).map(|()| Self::of_bytes(key));
        if key.len() > MEMO_MAX_KEY_LEN {
            return checked();
        }
        // A thread being torn down, or a re-entrant call (none exists), computes directly.
        MEMO.try_with(|memo| {
            let Ok(mut memo) = memo.try_borrow_mut() else {
                return checked();
            };
            match memo.get_or_insert_with(DigestMemo::new) {
                Some(memo) => memo.digest(key),
                None => checked(),
            }
        })
        .unwrap_or_else(|_| checked())
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

/// Entries of a thread's memo: a power of two, so a tag's bits pick a set of [`MEMO_WAYS`].
const MEMO_ENTRIES: usize = 4096;

/// Entries per set of the memo (`DigestMemo::digest` looks at two).
const MEMO_WAYS: usize = 2;
const _: () = assert!(MEMO_WAYS == 2 && (MEMO_ENTRIES / MEMO_WAYS).is_power_of_two());

/// Keys longer than this are not memoised (a generated key has 38 characters; a host's own
/// keys may be longer, but a token of kilobytes is no partner's key).
const MEMO_MAX_KEY_LEN: usize = 128;

thread_local! {
    /// The thread's memo; `None` until the thread's first presented key. `Some(None)` inside
    /// means the thread found no random key for its tags and never memoises.
    #[allow(clippy::option_option)]
    static MEMO: RefCell<Option<Option<DigestMemo>>> = const { RefCell::new(None) };
}

/// One set of the memo: `(tag, digest)` entries, the one used last first.
type MemoSet = [(u128, [u8; 32]); MEMO_WAYS];

/// A two-way memo from a presented key's tag to its digest.
struct DigestMemo {
    tagger: SipHasher24,
    /// `(tag, digest)` in sets of [`MEMO_WAYS`], the one used last first; a tag is never zero
    /// (its lowest bit is set), so a zero entry is empty.
    entries: Box<[MemoSet]>,
}

impl DigestMemo {
    /// A memo with a fresh random tag key, or `None` when the system has no randomness to give.
    fn new() -> Option<Self> {
        let mut key = [0_u8; 16];
        getrandom::fill(&mut key).ok()?;
        Some(Self {
            tagger: SipHasher24::new_with_key(&key),
            entries: vec![[(0, [0; 32]); MEMO_WAYS]; MEMO_ENTRIES / MEMO_WAYS].into_boxed_slice(),
        })
    }

    /// The digest of `key` if it is memoised, else if [`check_presented`] accepts it (then
    /// memoised).
    fn digest(&mut self, key: &[u8]) -> Result<KeyDigest, TokenFault> {
        let tag = self.tagger.hash(key).as_u128() | 1;
        // The mask keeps the index below the number of sets, so the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let set = &mut self.entries[(tag >> 1) as usize & (MEMO_ENTRIES / MEMO_WAYS - 1)];
        if set[0].0 == tag {
            return Ok(KeyDigest(set[0].1));
        }
        if set[1].0 == tag {
            set.swap(0, 1);
            return Ok(KeyDigest(set[0].1));
        }
        check_presented(key)?;
        let digest = KeyDigest::of_bytes(key);
        // The entry used longer ago goes.
        set[1] = (tag, digest.0);
        set.swap(0, 1);
        Ok(digest)
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memo's entry for `key` on this thread, if it holds one.
    fn memoised(key: &[u8]) -> Option<[u8; 32]> {
        MEMO.with(|memo| {
            let memo = memo.borrow();
            let memo = memo.as_ref()?.as_ref()?;
            let tag = memo.tagger.hash(key).as_u128() | 1;
            memo.entries
                .iter()
                .flatten()
                .find(|(stored, _)| *stored == tag)
                .map(|(_, digest)| *digest)
        })
    }

    #[test]
    fn a_presented_key_has_its_sha256_whether_memoised_or_not() {
        // Four times the memo's entries, twice over: entries are evicted and filled again.
        let keys: Vec<String> = (0..4 * MEMO_ENTRIES)
            .map(|index| format!("pk_test_memo_{index:024}"))
            .collect();
        for _ in 0..2 {
            for key in &keys {
                assert_eq!(
                    KeyDigest::of_presented(key.as_bytes()),
                    Ok(KeyDigest::of(key)),
                    "{key}"
                );
                assert_eq!(
                    KeyDigest::of_presented(key.as_bytes()),
                    Ok(KeyDigest::of(key))
                );
            }
        }
        let long = "k".repeat(MEMO_MAX_KEY_LEN + 1);
        assert_eq!(
            KeyDigest::of_presented(long.as_bytes()),
            Ok(KeyDigest::of(&long))
        );
        assert_eq!(
            memoised(long.as_bytes()),
            None,
            "a long token is not memoised"
        );
    }

    #[test]
    fn a_key_presented_again_is_answered_from_the_memo() {
        let key = b"pk_test_memoised_key_0000000000000000";
        assert_eq!(memoised(key), None);
        let digest = KeyDigest::of_presented(key).unwrap();
        assert_eq!(
            memoised(key),
            Some(*digest.as_bytes()),
            "memoised on first use"
        );
        // Only the memo can answer this: its entry is overwritten with another digest.
        let planted = *KeyDigest::of("pk_test_other").as_bytes();
        MEMO.with(|memo| {
            let mut memo = memo.borrow_mut();
            let memo = memo.as_mut().and_then(Option::as_mut).expect("a memo");
            let tag = memo.tagger.hash(key).as_u128() | 1;
            let entry = memo
                .entries
                .iter_mut()
                .flatten()
                .find(|(stored, _)| *stored == tag)
                .expect("the entry");
            entry.1 = planted;
        });
        assert_eq!(KeyDigest::of_presented(key).unwrap().as_bytes(), &planted);
        // A token differing by one byte has its own tag, so its own digest.
        let mut other = *key;
        other[other.len() - 1] = b'1';
        assert_eq!(
            KeyDigest::of_presented(&other),
            Ok(KeyDigest::of_bytes(&other))
        );
    }

    #[test]
    fn two_keys_of_one_set_are_both_kept_and_the_one_used_longer_ago_goes_for_a_third() {
        KeyDigest::of_presented(b"pk_test_first_on_this_thread").unwrap();
        let set_of = |key: &[u8]| {
            MEMO.with(|memo| {
                let memo = memo.borrow();
                let memo = memo.as_ref().and_then(Option::as_ref).expect("a memo");
                let tag = memo.tagger.hash(key).as_u128() | 1;
                (tag >> 1) as usize & (MEMO_ENTRIES / MEMO_WAYS - 1)
            })
        };
        let keys: Vec<String> = (0..)
            .map(|index| format!("pk_test_set_{index:024}"))
            .filter(|key| set_of(key.as_bytes()) == set_of(b"pk_test_set_000000000000000000000000"))
            .take(3)
            .collect();
        let [a, b, c] = [0, 1, 2].map(|index| keys[index].as_bytes());
        for key in [a, b, a] {
            assert_eq!(KeyDigest::of_presented(key), Ok(KeyDigest::of_bytes(key)));
        }
        assert!(memoised(a).is_some() && memoised(b).is_some(), "both kept");
        // `b` was used longer ago than `a`.
        assert_eq!(KeyDigest::of_presented(c), Ok(KeyDigest::of_bytes(c)));
        assert_eq!(
            (
                memoised(a).is_some(),
                memoised(b).is_some(),
                memoised(c).is_some()
            ),
            (true, false, true)
        );
    }

    #[test]
    fn a_refused_token_is_refused_every_time_and_never_memoised() {
        let key = crate::key::ApiKey::generate(crate::key::KeyEnvironment::Live).unwrap();
        // Another last checksum character: a generated key's shape, a wrong checksum.
        let mut forged = key.plaintext().as_bytes().to_vec();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
        let long = [&[b'k'; MEMO_MAX_KEY_LEN][..], b" k"].concat();
        for (token, fault) in [
            (&b"a b"[..], TokenFault::NotAToken),
            (b"", TokenFault::NotAToken),
            (b"a=b", TokenFault::NotAToken),
            (&forged, TokenFault::Forged),
            (&long, TokenFault::NotAToken),
        ] {
            for _ in 0..2 {
                assert_eq!(KeyDigest::of_presented(token), Err(fault));
                assert_eq!(memoised(token), None);
            }
        }
        let genuine = key.plaintext().as_bytes();
        assert_eq!(
            KeyDigest::of_presented(genuine),
            Ok(KeyDigest::of_bytes(genuine))
        );
        assert!(memoised(genuine).is_some());
    }

    #[test]
    fn each_thread_tags_with_its_own_random_key() {
        let key = |()| {
            KeyDigest::of_presented(b"pk_test_any").unwrap();
            MEMO.with(|memo| {
                memo.borrow()
                    .as_ref()
                    .and_then(Option::as_ref)
                    .map(|memo| memo.tagger.keys())
            })
        };
        let here = key(());
        let there = std::thread::spawn(move || key(()))
            .join()
            .expect("a thread");
        assert!(here.is_some() && there.is_some());
        assert_ne!(here, there);
    }
}
