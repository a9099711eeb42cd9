//! [`AllowedIps`]: the address ranges a key may be used from.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most address ranges one key may carry.
pub const MAX_ALLOWED_IPS: usize = 100;

/// The address ranges an API key may be used from (CIDR blocks, IPv4 and IPv6); none means
/// any address.
///
/// A request with a restricted key from an address outside every range is refused with a
/// 403 (after the 401 of an unknown, revoked or expired key). Ranges are networks: each is
/// kept without host bits and without duplicates, in the order given. An IPv4-mapped IPv6
/// client (`::ffff:192.0.2.1`) is matched as the IPv4 address it is.
///
/// ```
/// use partner_api::key::AllowedIps;
///
/// let allowed = AllowedIps::parse(["192.0.2.0/24", "2001:db8::1"]).unwrap();
/// assert!(allowed.allows("192.0.2.77".parse().unwrap()));
/// assert!(allowed.allows("2001:db8::1".parse().unwrap()));
/// assert!(!allowed.allows("198.51.100.1".parse().unwrap()));
/// assert!(AllowedIps::any().allows("198.51.100.1".parse().unwrap()));
/// assert!(AllowedIps::parse(["10.1.2.3/8"]).is_err(), "host bits past the prefix");
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct AllowedIps(
    // `None` for any address, never an empty slice: a key without ranges (nearly every key)
    // is cloned into each request's principal without touching a shared reference count.
    Option<Arc<[IpNet]>>,
);

/// Why address ranges were refused; its message names the offending range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedIpsError(String);

impl fmt::Display for AllowedIpsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AllowedIpsError {}

impl AllowedIps {
    /// Any address: no restriction.
    pub const fn any() -> Self {
        Self(None)
    }

    /// The ranges `ranges`, each as its network (host bits cleared; an IPv4-mapped IPv6 range
    /// as the IPv4 range it is), duplicates dropped.
    ///
    /// # Errors
    ///
    /// More than [`MAX_ALLOWED_IPS`] ranges.
    pub fn new(ranges: impl IntoIterator<Item = IpNet>) -> Result<Self, AllowedIpsError> {
        let mut kept: Vec<IpNet> = Vec::new();
        let mut given = 0_usize;
        for range in ranges {
            given += 1;
            let range = canonical_range(range).trunc();
            if !kept.contains(&range) {
                kept.push(range);
            }
        }
        if given > MAX_ALLOWED_IPS {
            return Err(AllowedIpsError(format!(
                "a key may carry at most {MAX_ALLOWED_IPS} address ranges"
            )));
        }
        Ok(Self((!kept.is_empty()).then(|| kept.into())))
    }

    /// Parses ranges as people write them: `192.0.2.0/24`, `2001:db8::/32`, or a single
    /// address (`203.0.113.7`, a /32; `2001:db8::1`, a /128).
    ///
    /// # Errors
    ///
    /// A range that does not parse, one with bits set past its prefix length
    /// (`10.1.2.3/8`: most likely a typo for a /32 or for `10.0.0.0/8`, so it is refused
    /// rather than guessed), or more than [`MAX_ALLOWED_IPS`] ranges.
    pub fn parse<S: AsRef<str>>(
        ranges: impl IntoIterator<Item = S>,
    ) -> Result<Self, AllowedIpsError> {
        let parsed = ranges
            .into_iter()
            .map(|range| parse_range(range.as_ref().trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(parsed)
    }

    /// Returns whether any address is allowed (no ranges).
    pub fn is_any(&self) -> bool {
        self.0.is_none()
    }

    /// Returns the ranges; empty for any address.
    pub fn ranges(&self) -> &[IpNet] {
        self.0.as_deref().unwrap_or_default()
    }

    /// Returns whether `address` is allowed.
    pub fn allows(&self, address: IpAddr) -> bool {
        if self.is_any() {
            return true;
        }
        let address = canonical(address);
        self.ranges().iter().any(|range| range.contains(&address))
    }
}

/// One range: a network in CIDR notation without host bits, or a single address.
fn parse_range(text: &str) -> Result<IpNet, AllowedIpsError> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Ok(IpNet::from(address));
    }
    let range: IpNet = text.parse().map_err(|_| {
        AllowedIpsError(format!(
            "{text:?} is not an IP address or a CIDR range (such as 192.0.2.0/24)"
        ))
    })?;
    if range.trunc() != range {
        return Err(AllowedIpsError(format!(
            "{text:?} has bits set past its prefix length (the network is {})",
            range.trunc()
        )));
    }
    Ok(range)
}

/// An IPv4-mapped IPv6 range (`::ffff:192.0.2.0/120`) as the IPv4 range it is, since
/// clients are matched as IPv4 ([`canonical`]).
fn canonical_range(range: IpNet) -> IpNet {
    match range {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => v6
            .addr()
            .to_ipv4_mapped()
            .and_then(|v4| ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).ok())
            .map_or(range, IpNet::V4),
        other => other,
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub(crate) fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

impl fmt::Debug for AllowedIps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.ranges().iter().map(ToString::to_string))
            .finish()
    }
}

/// A list of strings in CIDR notation (`["192.0.2.0/24", "2001:db8::1/128"]`).
impl Serialize for AllowedIps {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.ranges().iter().map(ToString::to_string))
    }
}

/// A list of strings as [`AllowedIps::parse`] takes them.
impl<'de> Deserialize<'de> for AllowedIps {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ranges = Vec::<String>::deserialize(deserializer)?;
        Self::parse(&ranges).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_single_addresses() {
        let allowed =
            AllowedIps::parse(["127.0.0.2", "10.0.0.0/8", "::1", " 2001:db8::/32 "]).unwrap();
        let shown: Vec<String> = allowed.ranges().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["127.0.0.2/32", "10.0.0.0/8", "::1/128", "2001:db8::/32"]
        );
        assert_eq!(
            serde_json::to_string(&allowed).unwrap(),
            r#"["127.0.0.2/32","10.0.0.0/8","::1/128","2001:db8::/32"]"#
        );
        let back: AllowedIps =
            serde_json::from_str(r#"["127.0.0.2/32","10.0.0.0/8","::1/128","2001:db8::/32"]"#)
                .unwrap();
        assert_eq!(back, allowed);
    }

    #[test]
    fn refuses_what_is_not_a_network() {
        for bad in [
            "",
            "10.0.0.0/33",
            "localhost",
            "10.1.2.3/8",
            "2001:db8::1/32",
            "1.2.3.4/-1",
        ] {
            assert!(AllowedIps::parse([bad]).is_err(), "{bad:?}");
        }
        let too_many: Vec<String> = (0..=MAX_ALLOWED_IPS)
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        assert!(AllowedIps::parse(&too_many).is_err());
        assert!(serde_json::from_str::<AllowedIps>(r#"["10.1.2.3/8"]"#).is_err());
    }

    #[test]
    fn matches_addresses_inside_any_range_and_mapped_ipv4() {
        let allowed = AllowedIps::parse(["127.0.0.2", "2001:db8::/64"]).unwrap();
        assert!(allowed.allows("127.0.0.2".parse().unwrap()));
        assert!(allowed.allows("::ffff:127.0.0.2".parse().unwrap()));
        assert!(!allowed.allows("127.0.0.1".parse().unwrap()));
        assert!(allowed.allows("2001:db8::ffff".parse().unwrap()));
        assert!(!allowed.allows("2001:db8:0:1::1".parse().unwrap()));
        let mapped = AllowedIps::parse(["::ffff:192.0.2.0/120"]).unwrap();
        assert_eq!(mapped.ranges()[0].to_string(), "192.0.2.0/24");
        assert!(mapped.allows("192.0.2.9".parse().unwrap()));
        assert!(mapped.allows("::ffff:192.0.2.9".parse().unwrap()));
        let duplicates = vec!["10.0.0.1"; MAX_ALLOWED_IPS + 1];
        assert!(AllowedIps::parse(&duplicates).is_err(), "counted as given");
        assert!(
            AllowedIps::new(["10.1.2.3/8".parse().unwrap(), "10.0.0.0/8".parse().unwrap()])
                .unwrap()
                .ranges()
                .len()
                == 1
        );
    }
}
