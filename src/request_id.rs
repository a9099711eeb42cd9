//! Request ids: every API response carries `x-request-id`, the one the request brought when it
//! is well-formed (a host's or a proxy's, such as tower-http's `SetRequestIdLayer`), a new
//! UUID otherwise.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The header that carries the id, in both directions.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken from a request.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The id of a request: the request's own `x-request-id` when there is exactly one and it is
/// 1 to [`MAX_REQUEST_ID_LEN`] bytes of ASCII letters, digits and `-_.:+/=@`; else a new
/// random (v4) UUID. The character set keeps ids safe to log and to quote.
pub(crate) fn request_id(headers: &HeaderMap) -> HeaderValue {
    let mut given = headers.get_all(&REQUEST_ID_HEADER).iter();
    if let (Some(value), None) = (given.next(), given.next()) {
        if is_well_formed(value.as_bytes()) {
            return value.clone();
        }
    }
    generate()
}

/// Whether `id` may be taken from a request as its id: 1 to [`MAX_REQUEST_ID_LEN`] bytes of
/// ASCII letters, digits and `-_.:+/=@`. A host that sets ids itself (tower-http's
/// `SetRequestIdLayer`) can drop others first, so its logs and the API agree on every id.
///
/// ```
/// use partner_api::request_id::is_well_formed;
/// assert!(is_well_formed(b"4f1c-9a:retry.2"));
/// assert!(!is_well_formed(b"two words"));
/// ```
pub fn is_well_formed(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-_.:+/=@".contains(&b))
}

/// A new request id: a random (v4) UUID in lower-case hex.
pub fn generate() -> HeaderValue {
    let mut text = [0; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
    HeaderValue::from_str(id).expect("a UUID is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ids(ids: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for id in ids {
            headers.append(REQUEST_ID_HEADER, HeaderValue::from_bytes(id).unwrap());
        }
        headers
    }

    fn is_uuid_v4(id: &HeaderValue) -> bool {
        uuid::Uuid::parse_str(id.to_str().unwrap()).is_ok_and(|id| id.get_version_num() == 4)
    }

    #[test]
    fn a_well_formed_id_is_kept() {
        for id in [
            &b"abc-123"[..],
            b"Root=1-5f84c7a5:req/7+x@edge_1.a",
            &[b'a'; 128],
        ] {
            assert_eq!(request_id(&with_ids(&[id])).as_bytes(), id);
        }
    }

    #[test]
    fn a_missing_repeated_or_malformed_id_is_replaced_by_a_fresh_uuid() {
        let cases: [&[&[u8]]; 6] = [
            &[],
            &[b""],
            &[b"has space"],
            &[b"quote\"d"],
            &[&[b'a'; 129]],
            &[b"one", b"two"],
        ];
        for ids in cases {
            let id = request_id(&with_ids(ids));
            assert!(is_uuid_v4(&id), "{ids:?} gave {id:?}");
        }
        assert_ne!(request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
    }
}
