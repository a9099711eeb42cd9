//! API key material: the SHA-256 digest under which stores keep keys, and the token grammar.

use std::fmt;

use sha2::{Digest, Sha256};

/// The longest API key the service accepts, in bytes. Longer tokens are rejected as invalid
/// before they are hashed or looked up.
pub const MAX_KEY_LEN: usize = 4096;

/// The SHA-256 digest of an API key: all a store ever sees of a key.
///
/// Stores persist and index only digests, so a leaked table cannot be replayed as keys. The
/// `Debug` output does not show the bytes, so a digest never ends up in a log by accident.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// The digest of the plaintext key `key`.
    pub fn of(key: &str) -> Self {
        Self::of_bytes(key.as_bytes())
    }

    /// The digest of a key as the header carried it.
    pub(crate) fn of_bytes(key: &[u8]) -> Self {
        Self(Sha256::digest(key).into())
    }

    /// A digest from its 32 bytes, as a store read it back.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes of the digest, as a store persists them.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(<redacted>)")
    }
}

/// Whether `key` can be presented as a bearer token: RFC 6750's `b64token`
/// (`1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`), at most
/// [`MAX_KEY_LEN`] bytes.
///
/// A store should refuse to hold a key for which this is false: no request could ever use it.
pub fn is_valid_key(key: &str) -> bool {
    is_valid_key_bytes(key.as_bytes())
}

/// [`is_valid_key`] on bytes, which is how the header parser sees the token.
pub(crate) fn is_valid_key_bytes(bytes: &[u8]) -> bool {
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    let body = &bytes[..bytes.len() - padding];
    // No early exit, so the compiler can check many bytes at once: this runs on every request.
    let all_token_bytes = body.iter().fold(true, |ok, &b| {
        ok & (b.is_ascii_alphanumeric()
            | (b == b'-')
            | (b == b'.')
            | (b == b'_')
            | (b == b'~')
            | (b == b'+')
            | (b == b'/'))
    });
    !body.is_empty() && bytes.len() <= MAX_KEY_LEN && all_token_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_of_the_key() {
        // SHA-256("abc") from FIPS 180-2, appendix B.1.
        assert_eq!(
            KeyDigest::of("abc").as_bytes()[..4],
            [0xba, 0x78, 0x16, 0xbf]
        );
        assert_eq!(
            KeyDigest::of("abc"),
            KeyDigest::from_bytes(*KeyDigest::of("abc").as_bytes())
        );
    }

    #[test]
    fn debug_hides_the_digest() {
        let digest = KeyDigest::of("abc");
        assert_eq!(format!("{digest:?}"), "KeyDigest(<redacted>)");
    }

    #[test]
    fn key_grammar_is_b64token() {
        for good in ["a", "pk_live_ABC123", "a-b.c_d~e+f/g", "abc==", "x="] {
            assert!(is_valid_key(good), "{good}");
        }
        for bad in ["", "=", "a b", "a=b", "é", "a\tb", "a,b", "\"a\""] {
            assert!(!is_valid_key(bad), "{bad}");
        }
        assert!(is_valid_key(&"k".repeat(MAX_KEY_LEN)));
        assert!(!is_valid_key(&"k".repeat(MAX_KEY_LEN + 1)));
    }
}
