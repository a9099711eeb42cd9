//! API key material: issuing keys ([`ApiKey::generate`]), the SHA-256 digest under which
//! stores keep them ([`KeyDigest`]), and the token grammar.
//!
//! A generated key reads `pk_live_` or `pk_test_`, then 24 random base62 characters (over 142
//! bits from the operating system's CSPRNG), then 6 base62 characters of the CRC32 of
//! everything before them: `pk_live_3xWq…` (38 characters). The prefix lets secret scanners
//! recognise a leaked key and tells live from test keys at a glance; the checksum lets the API
//! refuse a mistyped or forged key of this shape before any store lookup. Keys of any other
//! shape (a host's own, or seeded ones) are opaque tokens, looked up by digest.

use std::fmt;

mod allowed_ips;
pub(crate) mod digest;
mod permissions;
mod providers;

pub(crate) use allowed_ips::canonical;
pub use allowed_ips::{AllowedIps, AllowedIpsError, MAX_ALLOWED_IPS};
pub(crate) use digest::KeyDigest;
pub use permissions::{Permission, Permissions};
pub use providers::{canonical_providers, MAX_KEY_PROVIDERS, MAX_PROVIDER_CHARS};

/// The longest API key the service accepts, in bytes. Longer tokens are rejected as invalid
/// before they are hashed or looked up.
pub const MAX_KEY_LEN: usize = 4096;

/// The base62 alphabet of generated keys.
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Random characters in a generated key.
const RANDOM_LEN: usize = 24;
/// Checksum characters in a generated key: 62^6 > 2^32.
const CHECKSUM_LEN: usize = 6;
/// The prefix of generated live keys.
pub const LIVE_PREFIX: &str = "pk_live_";
/// The prefix of generated test keys.
pub const TEST_PREFIX: &str = "pk_test_";
/// The regular expression of generated keys, as a secret scanner (GitHub's partner program)
/// is told to match them: a prefix, then 24 random and 6 checksum base62 characters.
pub const KEY_PATTERN: &str = "pk_(live|test)_[0-9A-Za-z]{30}";

/// Which environment a generated key is for; it is written into the key's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyEnvironment {
    /// Production data: `pk_live_`.
    Live,
    /// Testing: `pk_test_`.
    Test,
}

impl KeyEnvironment {
    /// Returns the key prefix of this environment.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Live => LIVE_PREFIX,
            Self::Test => TEST_PREFIX,
        }
    }

    /// Returns the environment's name: `live` or `test`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Test => "test",
        }
    }
}

impl fmt::Display for KeyEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`KeyEnvironment`] from anything but `live` or `test`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownEnvironment;

impl fmt::Display for UnknownEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the environment must be \"live\" or \"test\"")
    }
}

impl std::error::Error for UnknownEnvironment {}

impl std::str::FromStr for KeyEnvironment {
    type Err = UnknownEnvironment;

    /// Parses `live` or `test`.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "live" => Ok(Self::Live),
            "test" => Ok(Self::Test),
            _ => Err(UnknownEnvironment),
        }
    }
}

/// A newly generated API key, for a host's settings page: show [`plaintext`](Self::plaintext)
/// once, store [`digest`](Self::digest), and list the key by its [`hint`](Self::hint).
///
/// ```
/// use partner_api::key::{ApiKey, KeyEnvironment};
///
/// let key = ApiKey::generate(KeyEnvironment::Live)?;
/// assert!(key.plaintext().starts_with("pk_live_"));
/// assert_eq!(key.plaintext().len(), 38);
/// assert!(!format!("{key:?}").contains(key.plaintext()));
/// # Ok::<(), partner_api::key::KeyGenerationError>(())
/// ```
pub struct ApiKey {
    plaintext: String,
    environment: KeyEnvironment,
}

/// The operating system's random number generator failed.
#[derive(Debug)]
pub struct KeyGenerationError(getrandom::Error);

impl fmt::Display for KeyGenerationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no randomness for a new API key: {}", self.0)
    }
}

impl std::error::Error for KeyGenerationError {}

impl ApiKey {
    /// Generates a key for `environment` from the operating system's CSPRNG.
    ///
    /// # Errors
    ///
    /// When the operating system provides no randomness.
    pub fn generate(environment: KeyEnvironment) -> Result<Self, KeyGenerationError> {
        let mut plaintext = String::with_capacity(38);
        plaintext.push_str(environment.prefix());
        // Rejection sampling keeps every character uniform: 248 = 4 * 62.
        let mut random = [0u8; 64];
        while plaintext.len() < environment.prefix().len() + RANDOM_LEN {
            getrandom::fill(&mut random).map_err(KeyGenerationError)?;
            for byte in random.iter().filter(|&&byte| byte < 248) {
                if plaintext.len() == environment.prefix().len() + RANDOM_LEN {
                    break;
                }
                plaintext.push(char::from(BASE62[usize::from(byte % 62)]));
            }
        }
        let checksum = checksum(plaintext.as_bytes());
        plaintext.extend(checksum.map(char::from));
        Ok(Self {
            plaintext,
            environment,
        })
    }

    /// Returns the key itself: show it once, and keep only its digest.
    pub fn plaintext(&self) -> &str {
        &self.plaintext
    }

    /// Returns the digest to store.
    pub fn digest(&self) -> KeyDigest {
        KeyDigest::of(&self.plaintext)
    }

    /// Returns the environment the key is for.
    pub fn environment(&self) -> KeyEnvironment {
        self.environment
    }

    /// Returns a short form that identifies the key on a settings page without revealing it: the
    /// prefix and the last four characters, `pk_live_...Xy12`.
    pub fn hint(&self) -> String {
        hint_of(&self.plaintext)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}

/// The shortest key whose hint shows its last four characters: generated keys are longer,
/// while a host's or a seed's short key would give away too large a share of itself.
pub const MIN_HINTED_LEN: usize = 32;

/// The hint of any key: its `pk_live_`/`pk_test_` prefix (if it has one), `...` and its last
/// four characters; a key under [`MIN_HINTED_LEN`] characters shows none of its own, so a
/// hint never gives away a useful share of a short key.
pub(crate) fn hint_of(key: &str) -> String {
    let prefix = [LIVE_PREFIX, TEST_PREFIX]
        .into_iter()
        .find(|prefix| key.starts_with(prefix))
        .unwrap_or("");
    let last = match key.len() {
        len if len < MIN_HINTED_LEN => "",
        // Keys are ASCII (a bearer token); `get` keeps this total for any text anyway.
        len => key.get(len - 4..).unwrap_or(""),
    };
    format!("{prefix}...{last}")
}

/// The checksum characters of `head`: its CRC32 in base62, fixed width (ASCII; no allocation,
/// since every request with a generated key checks it).
fn checksum(head: &[u8]) -> [u8; CHECKSUM_LEN] {
    let mut value = crc32fast::hash(head);
    let mut digits = [b'0'; CHECKSUM_LEN];
    for digit in digits.iter_mut().rev() {
        *digit = BASE62[(value % 62) as usize];
        value /= 62;
    }
    digits
}

/// Why a presented token can be no key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenFault {
    /// Not a `b64token` of at most [`MAX_KEY_LEN`] bytes.
    NotAToken,
    /// In the shape of a generated key, without its checksum ([`is_forged`]).
    Forged,
}

/// Whether a presented token can be a key: the grammar of [`is_valid_key`], as a fault.
/// A pure function of the bytes, which the memo of presented keys' digests relies on.
pub(crate) fn check_presented(token: &[u8]) -> Result<(), TokenFault> {
    if !is_token(token) {
        Err(TokenFault::NotAToken)
    } else if is_forged(token) {
        Err(TokenFault::Forged)
    } else {
        Ok(())
    }
}

/// Whether `key` has the shape of a generated key but not its checksum: such a key was
/// mistyped or made up, and no store needs to be asked about it.
pub(crate) fn is_forged(key: &[u8]) -> bool {
    has_generated_shape(key) && !checksum_matches(key)
}

/// Whether `key` is a generated key: its shape ([`KEY_PATTERN`]) and its checksum.
#[cfg(feature = "secret-scanning")]
pub(crate) fn is_generated(key: &[u8]) -> bool {
    has_generated_shape(key) && checksum_matches(key)
}

fn has_generated_shape(key: &[u8]) -> bool {
    key.len() == LIVE_PREFIX.len() + RANDOM_LEN + CHECKSUM_LEN
        && (key.starts_with(LIVE_PREFIX.as_bytes()) || key.starts_with(TEST_PREFIX.as_bytes()))
        && key[LIVE_PREFIX.len()..]
            .iter()
            .all(u8::is_ascii_alphanumeric)
}

/// Whether the last characters of a key in the generated shape are the checksum of the rest.
fn checksum_matches(key: &[u8]) -> bool {
    let (head, tail) = key.split_at(key.len() - CHECKSUM_LEN);
    checksum(head) == tail
}

/// Returns whether `key` can be presented as a bearer token: RFC 6750's `b64token`
/// (`1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`), at most
/// [`MAX_KEY_LEN`] bytes, and, if it has the shape of a generated key, with a checksum that
/// matches.
///
/// A store should refuse to hold a key for which this is false: no request could ever use it.
pub fn is_valid_key(key: &str) -> bool {
    is_token(key.as_bytes()) && !is_forged(key.as_bytes())
}

/// Whether `bytes` is a `b64token` of at most [`MAX_KEY_LEN`] bytes: the grammar of
/// [`is_valid_key`], without the checksum.
pub(crate) fn is_token(bytes: &[u8]) -> bool {
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    let body = &bytes[..bytes.len() - padding];
    // A table and no early exit: one load a byte, on every request.
    let all_token_bytes = body
        .iter()
        .fold(true, |ok, &b| ok & TOKEN_BYTES[usize::from(b)]);
    !body.is_empty() && bytes.len() <= MAX_KEY_LEN && all_token_bytes
}

/// The bytes of a `b64token` before its padding, by value.
const TOKEN_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] =
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/');
        byte += 1;
    }
    table
};

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
    fn generated_keys_have_the_documented_format() {
        let mut seen = std::collections::HashSet::new();
        for environment in [KeyEnvironment::Live, KeyEnvironment::Test] {
            for _ in 0..500 {
                let key = ApiKey::generate(environment).unwrap();
                let text = key.plaintext();
                assert_eq!(text.len(), 38);
                assert!(text.starts_with(environment.prefix()));
                assert!(text[8..].bytes().all(|b| b.is_ascii_alphanumeric()));
                assert!(is_valid_key(text));
                assert_eq!(key.digest(), KeyDigest::of(text));
                assert_eq!(
                    key.hint(),
                    format!("{}...{}", environment.prefix(), &text[34..])
                );
                assert!(!format!("{key:?}").contains(text));
                assert!(seen.insert(text.to_owned()), "keys repeat");
            }
        }
        // Every character position varies.
        let keys: Vec<String> = (0..200)
            .map(|_| {
                ApiKey::generate(KeyEnvironment::Live)
                    .unwrap()
                    .plaintext()
                    .to_owned()
            })
            .collect();
        for position in 8..32 {
            let distinct: std::collections::HashSet<u8> =
                keys.iter().map(|k| k.as_bytes()[position]).collect();
            assert!(distinct.len() > 20, "position {position}");
        }
    }

    #[test]
    fn a_changed_character_breaks_the_checksum() {
        let key = ApiKey::generate(KeyEnvironment::Test).unwrap();
        let original = key.plaintext().as_bytes().to_vec();
        for position in 8..original.len() {
            let mut changed = original.clone();
            changed[position] = if changed[position] == b'a' {
                b'b'
            } else {
                b'a'
            };
            assert!(
                is_token(&changed) && is_forged(&changed),
                "position {position}"
            );
        }
        // Keys of any other shape are opaque and stay valid.
        for other in [
            "pk_test_demo_0123456789abcdefghijklmn",
            "pk_live_short",
            "sk_live_3xWq",
        ] {
            assert!(is_valid_key(other), "{other}");
        }
    }

    #[test]
    fn hints_show_the_prefix_and_the_last_four_characters_only() {
        assert_eq!(
            hint_of("pk_test_demo_0123456789abcdefghijklmn"),
            "pk_test_...klmn"
        );
        assert_eq!(hint_of("sk_abcdefghijklmnop"), "...");
        assert_eq!(hint_of("pk_live_0123456789012345678901"), "pk_live_...");
        assert_eq!(hint_of("sk_abcdefghijklmnopqrstuvwxyz0123"), "...0123");
        assert_eq!(hint_of("short"), "...");
        assert_eq!("live".parse(), Ok(KeyEnvironment::Live));
        assert_eq!("test".parse(), Ok(KeyEnvironment::Test));
        assert!("prod".parse::<KeyEnvironment>().is_err());
        assert_eq!(KeyEnvironment::Test.to_string(), "test");
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
        // Every byte, against RFC 6750's grammar as written.
        for byte in 0..=u8::MAX {
            let in_grammar =
                byte.is_ascii_alphabetic() || byte.is_ascii_digit() || b"-._~+/".contains(&byte);
            assert_eq!(is_token(&[byte]), in_grammar, "{byte:#04x}");
            assert_eq!(is_token(&[b'a', byte, b'a']), in_grammar, "{byte:#04x}");
        }
    }
}
