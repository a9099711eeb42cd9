//! Bearer authentication (contract section 5, RFC 6750): parsing the `Authorization` header and the
//! `WWW-Authenticate` challenges of a 401.

use crate::key::Permission;
use http::header::{HeaderMap, HeaderValue, AUTHORIZATION};

use crate::key::{check_presented, KeyDigest, TokenFault};
use crate::metrics::AuthFailureReason;

/// Why a request is not authenticated; each answer is a 401.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No `Authorization` header.
    Missing,
    /// An `Authorization` header with another scheme than `Bearer`.
    OtherScheme,
    /// A `Bearer` credential that is not one well-formed token, or several headers.
    Malformed,
    /// A token in the shape of a generated key whose checksum does not match: mistyped or
    /// made up, refused without asking a store.
    BadChecksum,
    /// A well-formed token that the key store refused (unknown, revoked or expired: the
    /// same answer for all).
    Refused(AuthFailureReason),
}

impl AuthFailure {
    /// RFC 6750 section 3: an error code only when a bearer token was presented.
    pub(crate) fn token_presented(self) -> bool {
        !matches!(self, Self::Missing | Self::OtherScheme)
    }

    /// The `reason` label of the failure's metric: another scheme counts as malformed.
    pub(crate) fn reason(self) -> AuthFailureReason {
        match self {
            Self::Missing => AuthFailureReason::Missing,
            Self::OtherScheme | Self::Malformed => AuthFailureReason::Malformed,
            Self::BadChecksum => AuthFailureReason::BadChecksum,
            Self::Refused(reason) => reason,
        }
    }
}

/// The token of the request's one `Authorization: Bearer <token>` header.
///
/// The scheme is case-insensitive (RFC 9110 section 11.1) and separated from the token by one
/// or more spaces; the token must be an RFC 6750 `b64token` of at most
/// [`MAX_KEY_LEN`](crate::key::MAX_KEY_LEN) bytes, and a token in the shape of a generated
/// key must carry its checksum. Anything else is refused before any store is asked.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<&[u8], AuthFailure> {
    let token = bearer_credentials(headers)?;
    check_presented(token).map_err(AuthFailure::from)?;
    Ok(token)
}

/// The digest of the key of the request's one `Authorization: Bearer <token>` header, refused
/// as [`bearer_token`] refuses; a token presented on this thread recently is found in the
/// memo of presented keys' digests ([`KeyDigest::of_presented`]) without being checked again.
pub(crate) fn presented_key(headers: &HeaderMap) -> Result<KeyDigest, AuthFailure> {
    KeyDigest::of_presented(bearer_credentials(headers)?).map_err(AuthFailure::from)
}

impl From<TokenFault> for AuthFailure {
    fn from(fault: TokenFault) -> Self {
        match fault {
            TokenFault::NotAToken => Self::Malformed,
            TokenFault::Forged => Self::BadChecksum,
        }
    }
}

/// What follows `Bearer` and its spaces in the request's one `Authorization` header, not yet
/// checked to be a token.
fn bearer_credentials(headers: &HeaderMap) -> Result<&[u8], AuthFailure> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(AuthFailure::Missing)?;
    if values.next().is_some() {
        return Err(AuthFailure::Malformed);
    }
    // One pass over the bytes; `check_presented` refuses control characters and
    // non-ASCII, so the header is never decoded as text first.
    let value = trim_ows(value.as_bytes());
    let scheme_end = value
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(value.len());
    if !value[..scheme_end].eq_ignore_ascii_case(b"bearer") {
        return Err(AuthFailure::OtherScheme);
    }
    // RFC 6750: `Bearer 1*SP b64token`. A tab is no separator, and neither an empty token nor
    // two tokens are a token; `check_presented` refuses what is left over.
    let separated = &value[scheme_end..];
    let spaces = separated.iter().take_while(|&&b| b == b' ').count();
    let token = &separated[spaces..];
    if spaces == 0 {
        return Err(AuthFailure::Malformed);
    }
    Ok(token)
}

/// `bytes` without leading and trailing spaces and tabs (RFC 9110 OWS).
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |end| end + 1);
    &bytes[start..end]
}

/// The two `WWW-Authenticate` values of a realm, built once when the service is configured.
#[derive(Clone, Debug)]
pub(crate) struct Challenges {
    without_token: HeaderValue,
    with_token: HeaderValue,
    /// The 403 of a valid key that lacks the permission a route needs, by permission.
    insufficient_scope: [HeaderValue; 2],
}

impl Challenges {
    /// # Panics
    ///
    /// When `realm` cannot be an RFC 9110 quoted-string without escapes (it holds `"`, `\`
    /// or a character that is not visible ASCII or space).
    pub(crate) fn new(realm: &str) -> Self {
        assert!(
            realm
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\'),
            "the realm must be printable ASCII without '\"' or '\\'"
        );
        let header = |text: String| {
            HeaderValue::from_str(&text).expect("a printable ASCII realm makes a valid header")
        };
        Self {
            without_token: header(format!("Bearer realm=\"{realm}\"")),
            with_token: header(format!("Bearer realm=\"{realm}\", error=\"invalid_token\"")),
            insufficient_scope: Permission::ALL.map(|permission| {
                header(format!(
                    "Bearer realm=\"{realm}\", error=\"insufficient_scope\", scope=\"{permission}\""
                ))
            }),
        }
    }

    /// The challenge of RFC 6750 section 3.1 for a key that lacks `permission`.
    pub(crate) fn insufficient_scope(&self, permission: Permission) -> HeaderValue {
        let at = Permission::ALL
            .iter()
            .position(|held| *held == permission)
            .unwrap_or_default();
        self.insufficient_scope[at].clone()
    }

    pub(crate) fn for_failure(&self, failure: AuthFailure) -> HeaderValue {
        if failure.token_presented() {
            self.with_token.clone()
        } else {
            self.without_token.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&[u8]]) -> Result<String, AuthFailure> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_bytes(value).unwrap());
        }
        // The digest path refuses alike, and agrees on the digest, memoised or not.
        for _ in 0..2 {
            assert_eq!(
                presented_key(&headers),
                bearer_token(&headers).map(KeyDigest::of_bytes),
                "{values:?}"
            );
        }
        bearer_token(&headers).map(|token| String::from_utf8(token.to_vec()).unwrap())
    }

    #[test]
    fn accepts_one_bearer_token_with_any_scheme_case() {
        for value in [
            &b"Bearer abc"[..],
            b"bearer abc",
            b"BEARER abc",
            b"Bearer   abc",
            b"Bearer abc ",
            b" Bearer abc",
        ] {
            assert_eq!(parse(&[value]).as_deref(), Ok("abc"), "{value:?}");
        }
        assert_eq!(
            parse(&[b"Bearer a-b.c_d~e+f/g=="]).as_deref(),
            Ok("a-b.c_d~e+f/g==")
        );
    }

    #[test]
    fn tells_missing_from_other_schemes_from_malformed() {
        assert_eq!(parse(&[]), Err(AuthFailure::Missing));
        for value in [
            &b"Basic YWxhZGRpbjpvcGVuc2VzYW1l"[..],
            b"abc",
            b"Bearerabc",
            b"Token abc",
        ] {
            assert_eq!(parse(&[value]), Err(AuthFailure::OtherScheme), "{value:?}");
        }
        for value in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer\tabc",
            b"Bearer \tabc",
            b"Bearer abc def",
            b"Bearer abc\tdef",
            b"Bearer ab=c",
            b"Bearer \"abc\"",
            b"Bearer caf\xc3\xa9",
        ] {
            assert_eq!(parse(&[value]), Err(AuthFailure::Malformed), "{value:?}");
        }
        assert_eq!(
            parse(&[b"Bearer abc", b"Bearer abc"]),
            Err(AuthFailure::Malformed)
        );
        let long = format!("Bearer {}", "k".repeat(crate::key::MAX_KEY_LEN + 1));
        assert_eq!(parse(&[long.as_bytes()]), Err(AuthFailure::Malformed));
    }

    #[test]
    fn challenges_name_the_realm_and_the_error_only_for_tokens() {
        let challenges = Challenges::new("partners");
        assert_eq!(
            challenges.for_failure(AuthFailure::Missing),
            "Bearer realm=\"partners\""
        );
        assert_eq!(
            challenges.for_failure(AuthFailure::OtherScheme),
            "Bearer realm=\"partners\""
        );
        assert_eq!(
            challenges.for_failure(AuthFailure::BadChecksum),
            "Bearer realm=\"partners\", error=\"invalid_token\""
        );
        assert_eq!(
            challenges.for_failure(AuthFailure::Refused(AuthFailureReason::Revoked)),
            "Bearer realm=\"partners\", error=\"invalid_token\""
        );
        assert_eq!(
            challenges.for_failure(AuthFailure::Malformed),
            "Bearer realm=\"partners\", error=\"invalid_token\""
        );
    }

    #[test]
    #[should_panic(expected = "realm")]
    fn rejects_a_realm_that_needs_escaping() {
        let _ = Challenges::new("a\"b");
    }
}
