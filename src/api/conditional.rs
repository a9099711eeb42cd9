//! Conditional `GET` (RFC 9110 sections 8.8.3 and 13.1.2): a strong `ETag` over every body
//! the API serves with a key, and `304 Not Modified` for an `If-None-Match` that matches it.

use http::header::{HeaderMap, HeaderValue, IF_NONE_MATCH};
use xxhash_rust::xxh3::{xxh3_128, Xxh3};

/// The `If-None-Match` values of a request, kept only when there are any.
#[derive(Clone, Debug, Default)]
pub(crate) struct IfNoneMatch(Vec<HeaderValue>);

impl IfNoneMatch {
    /// The request's `If-None-Match` fields; `None` without one, so a request without the
    /// header costs no allocation.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let mut values = headers.get_all(IF_NONE_MATCH).iter().peekable();
        values.peek()?;
        Some(Self(values.cloned().collect()))
    }

    /// Whether the condition fails for a representation tagged `etag`, that is, whether the
    /// answer is `304`. If-None-Match uses the weak comparison: `W/"x"` matches `"x"`; `*`
    /// matches any current representation. Members that are not entity tags match nothing.
    pub(crate) fn matches(&self, etag: &HeaderValue) -> bool {
        let etag = etag.as_bytes();
        self.0.iter().any(|value| {
            value.as_bytes().split(|&b| b == b',').any(|member| {
                let member = member.trim_ascii();
                member == b"*" || member.strip_prefix(b"W/").unwrap_or(member) == etag
            })
        })
    }
}

/// A strong entity tag for a body written as `chunks`: its 128-bit XXH3 hash, in hex and
/// quoted. XXH3 is a fixed, specified algorithm, so equal bytes give equal tags on every
/// replica, across restarts and versions; it is not a cryptographic hash, and needs not be:
/// a tag only has to change when the body does (2^-128 odds that a change keeps it), and a
/// client can only ever compare it with tags of bodies its own key may read. It hashes a
/// `/me` body in a few nanoseconds, where SHA-256 took over a hundred.
pub(crate) fn entity_tag(chunks: &[&[u8]]) -> HeaderValue {
    let digest = match chunks {
        [body] => xxh3_128(body),
        _ => {
            let mut hasher = Xxh3::new();
            for chunk in chunks {
                hasher.update(chunk);
            }
            hasher.digest128()
        }
    }
    .to_be_bytes();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut tag = [b'"'; 34];
    for (index, byte) in digest.iter().enumerate() {
        tag[1 + 2 * index] = HEX[usize::from(byte >> 4)];
        tag[2 + 2 * index] = HEX[usize::from(byte & 0x0f)];
    }
    HeaderValue::from_bytes(&tag).expect("a quoted hex string is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(values: &[&'static str]) -> IfNoneMatch {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(IF_NONE_MATCH, HeaderValue::from_static(value));
        }
        IfNoneMatch::from_headers(&headers).expect("at least one value")
    }

    #[test]
    fn entity_tags_are_strong_quoted_and_depend_on_every_byte() {
        let tag = entity_tag(&[b"{\"a\":", b"1}"]);
        let text = tag.to_str().unwrap();
        assert_eq!(text.len(), 34);
        assert!(text.starts_with('"') && text.ends_with('"') && !text.starts_with("W/"));
        // Where the chunks split does not matter; what they hold does.
        assert_eq!(tag, entity_tag(&[b"{\"a\":1}"]));
        assert_ne!(tag, entity_tag(&[b"{\"a\":2}"]));
    }

    #[test]
    fn if_none_match_follows_the_weak_comparison_of_rfc_9110() {
        let tag = entity_tag(&[b"body"]);
        let quoted = tag.to_str().unwrap().to_owned();
        let leaked: &'static str = Box::leak(quoted.clone().into_boxed_str());
        assert!(condition(&[leaked]).matches(&tag));
        let weak: &'static str = Box::leak(format!("W/{quoted}").into_boxed_str());
        assert!(condition(&[weak]).matches(&tag));
        let listed: &'static str = Box::leak(format!("\"other\" ,  {quoted}").into_boxed_str());
        assert!(condition(&[listed]).matches(&tag));
        assert!(condition(&["\"other\"", leaked]).matches(&tag));
        assert!(condition(&["*"]).matches(&tag));
        // An unquoted or altered tag is another tag.
        let bare: &'static str = Box::leak(quoted.trim_matches('"').to_owned().into_boxed_str());
        assert!(!condition(&[bare]).matches(&tag));
        assert!(!condition(&["\"other\"", ""]).matches(&tag));
        assert!(IfNoneMatch::from_headers(&HeaderMap::new()).is_none());
    }
}
