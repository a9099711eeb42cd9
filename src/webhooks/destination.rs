//! Where deliveries may go (SSRF): `https` only by default, and never to an address in a
//! blocked range, checked for every address a name resolves to when connecting, not when the
//! endpoint is added (a name can resolve elsewhere tomorrow).

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;
use ipnet::IpNet;

/// Ranges no delivery connects to unless the host allows them: "this network", private
/// (RFC 1918), CGNAT, loopback, link-local (with the cloud metadata address
/// 169.254.169.254), IETF protocol assignments, documentation, 6to4 relay, benchmarking,
/// multicast, reserved and broadcast; for IPv6 the unspecified and loopback addresses,
/// IPv4-compatible (deprecated), IPv4-mapped and IPv4-translated addresses (they reach IPv4
/// ranges above), NAT64, discard-only,
/// IETF assignments (Teredo among them), documentation, 6to4, unique-local, site-local,
/// link-local and multicast.
const BLOCKED: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/96",
    "::ffff:0:0/96",
    "::ffff:0:0:0/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/23",
    "2001:db8::/32",
    "2002::/16",
    "3fff::/20",
    "fc00::/7",
    "fec0::/10",
    "fe80::/10",
    "ff00::/8",
];

/// Which destinations deliveries may reach.
///
/// By default: `https` URLs whose every address is outside the blocked ranges (loopback,
/// private, link-local with 169.254.169.254, CGNAT, multicast, documentation and reserved
/// ranges; IPv6 unique-local, link-local and mapped addresses). A host allows a range its
/// receivers live in with [`with_allowed_subnet`](Self::with_allowed_subnet), and plain
/// `http` with [`with_allow_http`](Self::with_allow_http) (for tests and private networks).
#[derive(Clone, Debug)]
pub struct DestinationPolicy {
    allow_http: bool,
    allowed: Vec<IpNet>,
    blocked: Arc<[IpNet]>,
}

impl Default for DestinationPolicy {
    fn default() -> Self {
        Self {
            allow_http: false,
            allowed: Vec::new(),
            blocked: BLOCKED
                .iter()
                .map(|range| range.parse().expect("the blocked ranges are valid CIDR"))
                .collect(),
        }
    }
}

impl DestinationPolicy {
    /// The default policy: `https` only, blocked ranges refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows plain `http` URLs too.
    #[must_use]
    pub fn with_allow_http(mut self, allow: bool) -> Self {
        self.allow_http = allow;
        self
    }

    /// Allows the addresses of `subnet`, even inside a blocked range.
    #[must_use]
    pub fn with_allowed_subnet(mut self, subnet: IpNet) -> Self {
        self.allowed.push(subnet.trunc());
        self
    }

    /// Returns whether plain `http` is allowed.
    pub fn allows_http(&self) -> bool {
        self.allow_http
    }

    /// Checks one address.
    ///
    /// # Errors
    ///
    /// [`BlockedDestination`] naming the address, when it is in a blocked range that no
    /// allowed subnet covers.
    pub fn check_address(&self, address: IpAddr) -> Result<(), BlockedDestination> {
        if self.allowed.iter().any(|range| range.contains(&address)) {
            return Ok(());
        }
        match self.blocked.iter().find(|range| range.contains(&address)) {
            Some(range) => Err(BlockedDestination::Address {
                address,
                range: *range,
            }),
            None => Ok(()),
        }
    }

    /// Checks a URL before anything is resolved: its scheme, and its host when it is an
    /// address literal (a name is checked when it is resolved).
    ///
    /// # Errors
    ///
    /// [`BlockedDestination`] for another scheme, `http` when not allowed, or a blocked
    /// address literal.
    pub fn check_url(&self, url: &http::Uri) -> Result<(), BlockedDestination> {
        match url.scheme_str() {
            Some("https") => {}
            Some("http") if self.allow_http => {}
            Some("http") => return Err(BlockedDestination::Http),
            _ => return Err(BlockedDestination::Scheme),
        }
        let host = url.host().unwrap_or_default();
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(address) => self.check_address(address),
            Err(_) => Ok(()),
        }
    }
}

/// Why a destination was refused; the delivery attempt fails with this as its error, and no
/// connection is made.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockedDestination {
    /// A plain `http` URL, and the host allows only `https`.
    Http,
    /// A scheme other than `http` or `https`.
    Scheme,
    /// The destination is an address in a blocked range.
    Address {
        /// The address.
        address: IpAddr,
        /// The blocked range it is in.
        range: IpNet,
    },
    /// The destination's name does not resolve, or resolves to an address in a blocked range:
    /// one cause for both, and which address is not said, so that an organization cannot map
    /// a private network's names through its endpoints' attempts.
    Resolved,
}

/// What the resolver's refusal says, which an attempt records as its cause
/// (`attempts::cause::NO_ADDRESS`): one for a name that does not resolve and one that resolves
/// to a blocked address.
pub(super) const NO_ADDRESS: &str = "the name does not resolve to an address deliveries may reach";

impl fmt::Display for BlockedDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http => f.write_str("destination refused: only https URLs are allowed"),
            Self::Scheme => f.write_str("destination refused: not an http or https URL"),
            Self::Address { address, range } => write!(
                f,
                "destination refused: {address} is in the blocked range {range}"
            ),
            Self::Resolved => f.write_str(NO_ADDRESS),
        }
    }
}

impl std::error::Error for BlockedDestination {}

/// The HTTP client's resolver: the system's, then every address checked against the policy;
/// one blocked address refuses the name, so a name that mixes a public and a private answer
/// cannot be used to reach the private one.
#[derive(Clone)]
pub(super) struct CheckedResolver {
    pub(super) policy: Arc<DestinationPolicy>,
}

type Resolving =
    Pin<Box<dyn Future<Output = Result<std::vec::IntoIter<SocketAddr>, std::io::Error>> + Send>>;

impl tower::Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            // A name that does not resolve fails as one that resolves to a blocked address.
            let unreachable = || {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    BlockedDestination::Resolved,
                )
            };
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await
                .map_err(|_| unreachable())?
                .collect();
            if addresses.is_empty()
                || addresses
                    .iter()
                    .any(|address| policy.check_address(address.ip()).is_err())
            {
                return Err(unreachable());
            }
            Ok(addresses.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &DestinationPolicy, address: &str) -> bool {
        policy.check_address(address.parse().unwrap()).is_err()
    }

    #[test]
    fn blocks_internal_ranges_and_allows_public_ones() {
        let policy = DestinationPolicy::new();
        for address in [
            "127.0.0.1",
            "10.1.2.3",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.10",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "2001:db8::1",
            "ff02::1",
            "64:ff9b::a00:1",
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
        ] {
            assert!(refused(&policy, address), "{address} should be refused");
        }
        for address in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "172.32.0.1"] {
            assert!(!refused(&policy, address), "{address} should be allowed");
        }
    }

    #[test]
    fn an_allowed_subnet_opens_a_blocked_range_only_there() {
        let policy = DestinationPolicy::new().with_allowed_subnet("127.0.0.0/8".parse().unwrap());
        assert!(!refused(&policy, "127.0.0.1"));
        assert!(refused(&policy, "10.0.0.1"));
        assert!(refused(&policy, "::1"));
    }

    #[test]
    fn checks_the_scheme_and_address_literals() {
        let policy = DestinationPolicy::new();
        let check = |url: &str| policy.check_url(&url.parse().unwrap());
        assert_eq!(check("http://example.com/"), Err(BlockedDestination::Http));
        assert!(check("https://example.com/").is_ok());
        assert!(matches!(
            check("https://127.0.0.1/"),
            Err(BlockedDestination::Address { .. })
        ));
        assert!(matches!(
            check("https://[::1]:8443/"),
            Err(BlockedDestination::Address { .. })
        ));
        assert!(check("https://93.184.216.34/").is_ok());
        let open = DestinationPolicy::new().with_allow_http(true);
        assert!(open
            .check_url(&"http://example.com/".parse().unwrap())
            .is_ok());
        assert_eq!(
            open.check_url(&"ftp://example.com/".parse().unwrap()),
            Err(BlockedDestination::Scheme)
        );
    }
}
