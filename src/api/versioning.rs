//! Which API version answers a request: the one its version header names, else its key's
//! pinned one; the header that echoes it. Made once per configuration, so a request clones a
//! header value and no more.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::versions::{ApiVersion, Versions, DEFAULT_VERSION_HEADER};

/// What a request's version header asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AskedVersion {
    /// No header: the key's pinned version.
    Pinned,
    /// A version the API offers.
    Named(ApiVersion),
    /// A name that is no version the API offers (or the header twice): a 400.
    Unknown,
}

/// The API's versions as the request path uses them.
#[derive(Clone)]
pub(crate) struct ApiVersions {
    chain: Versions,
    header: HeaderName,
    /// Each offered version with its name, made once, newest first.
    offered: Box<[Offered]>,
    /// What the 400 of a name that is not offered names: the header.
    unknown_header: String,
}

/// An offered version, with its name as the echo's value and as the target its calls are
/// counted under (made once, so neither allocates on a request).
#[derive(Clone)]
struct Offered {
    version: ApiVersion,
    echo: HeaderValue,
    target: Arc<str>,
}

impl ApiVersions {
    /// The request path's view of `chain`, read from and echoed in `header`.
    pub(crate) fn new(chain: Versions, header: HeaderName) -> Self {
        let offered = chain
            .offered()
            .map(|version| {
                let name = version.to_string();
                Offered {
                    version,
                    echo: HeaderValue::from_str(&name).expect("a date is a header value"),
                    target: Arc::from(name),
                }
            })
            .collect();
        let unknown_header = format!("header {}", canonical(&header));
        Self {
            chain,
            header,
            offered,
            unknown_header,
        }
    }

    /// The chain.
    pub(crate) fn chain(&self) -> &Versions {
        &self.chain
    }

    /// The header's name.
    pub(crate) fn header(&self) -> &HeaderName {
        &self.header
    }

    /// What the request's `headers` ask for.
    pub(crate) fn asked(&self, headers: &HeaderMap) -> AskedVersion {
        let mut values = headers.get_all(&self.header).iter();
        let Some(value) = values.next() else {
            return AskedVersion::Pinned;
        };
        if values.next().is_some() {
            return AskedVersion::Unknown;
        }
        self.named_bytes(value.as_bytes())
    }

    /// As [`named`](Self::named), over the name's bytes.
    fn named_bytes(&self, name: &[u8]) -> AskedVersion {
        self.offered
            .iter()
            .find(|offered| offered.echo.as_bytes() == name)
            .map_or(AskedVersion::Unknown, |offered| {
                AskedVersion::Named(offered.version)
            })
    }

    /// The version `name` names, if the API offers it: compared with the offered versions'
    /// names as bytes (a name is exactly `YYYY-MM-DD`), so no date is parsed on the request
    /// path.
    pub(crate) fn named(&self, name: &str) -> AskedVersion {
        self.named_bytes(name.as_bytes())
    }

    /// The version that answers a key pinned to `pinned` (`None`: the first) when its request
    /// names none: its own, or, for a version this API does not offer (a key pinned by
    /// another configuration), the newest offered before it (else the first).
    pub(crate) fn pinned(&self, pinned: Option<ApiVersion>) -> ApiVersion {
        let first = self.chain.first();
        let Some(pinned) = pinned else {
            return first;
        };
        self.chain
            .offered()
            .find(|offered| *offered <= pinned)
            .unwrap_or(first)
    }

    /// The header that says `version` answered.
    pub(crate) fn echo(&self, version: ApiVersion) -> Option<(HeaderName, HeaderValue)> {
        self.find(version)
            .map(|offered| (self.header.clone(), offered.echo.clone()))
    }

    /// The target the calls served at `version` are counted under: its name.
    pub(crate) fn target(&self, version: ApiVersion) -> Option<&Arc<str>> {
        self.find(version).map(|offered| &offered.target)
    }

    fn find(&self, version: ApiVersion) -> Option<&Offered> {
        self.offered
            .iter()
            .find(|offered| offered.version == version)
    }

    /// What the 400 of a header that names no version offered names: `header Api-Version`.
    pub(crate) fn unknown_header(&self) -> &str {
        &self.unknown_header
    }
}

impl Default for ApiVersions {
    fn default() -> Self {
        Self::new(
            Versions::shipped(),
            HeaderName::from_static(DEFAULT_VERSION_HEADER),
        )
    }
}

/// A header's name as people write it (`Api-Version`): each word capitalized.
fn canonical(header: &HeaderName) -> String {
    header
        .as_str()
        .split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::{FIRST, UPDATED_AT};

    #[test]
    fn a_request_names_one_offered_version_or_is_refused() {
        let versions = ApiVersions::default();
        let asked = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append("api-version", HeaderValue::from_str(value).unwrap());
            }
            versions.asked(&headers)
        };
        assert_eq!(asked(&[]), AskedVersion::Pinned);
        assert_eq!(asked(&["2026-11-27"]), AskedVersion::Named(FIRST));
        assert_eq!(asked(&["2026-11-28"]), AskedVersion::Named(UPDATED_AT));
        assert_eq!(
            asked(&["2026-12-01"]),
            AskedVersion::Named(crate::versions::KEY_ACCESS)
        );
        for bad in [
            "2026-11-29",
            "2026-11-27 ",
            "latest",
            "",
            "2026-11-27,2026-11-28",
        ] {
            assert_eq!(asked(&[bad]), AskedVersion::Unknown, "{bad:?}");
        }
        assert_eq!(asked(&["2026-11-27", "2026-11-27"]), AskedVersion::Unknown);
        assert_eq!(versions.pinned(None), FIRST);
        assert_eq!(versions.pinned(Some(UPDATED_AT)), UPDATED_AT);
        assert_eq!(
            versions.pinned(Some(ApiVersion::from_ymd(2027, 1, 1))),
            crate::versions::NEWEST
        );
        assert_eq!(
            versions.pinned(Some(ApiVersion::from_ymd(2020, 1, 1))),
            FIRST
        );
        assert_eq!(versions.unknown_header, "header Api-Version");
    }
}
