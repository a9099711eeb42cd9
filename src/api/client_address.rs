//! Who is asking: the client's address, from the connection's peer and, behind trusted
//! proxies only, from `X-Forwarded-For` or `Forwarded`.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::header::{HeaderMap, FORWARDED};
use http::HeaderName;
use ipnet::IpNet;

use crate::key::canonical;

/// `X-Forwarded-For`, the de facto header of proxies.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The address of the connection's peer: the host puts it in each request's extensions, and
/// the API reads the client's address from it (to throttle failed authentication by client,
/// and to hold keys to their address ranges). A host that makes a service per connection
/// can instead tell the API once, with
/// [`PartnerApi::with_peer_addr`](crate::PartnerApi::with_peer_addr); an extension, when a
/// request has one, wins.
///
/// hyper's accept loop has it from `TcpListener::accept`; axum from
/// `ConnectInfo<SocketAddr>`; tonic from `Request::remote_addr`. Without it, failed
/// authentication is not throttled (one budget shared by every client would let one of them
/// lock the others out).
///
/// ```
/// use std::net::SocketAddr;
/// use partner_api::PeerAddr;
///
/// let mut request = http::Request::new(());
/// let peer: SocketAddr = "192.0.2.7:50312".parse().unwrap();
/// request.extensions_mut().insert(PeerAddr(peer));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The proxies whose forwarding headers are believed.
#[derive(Clone, Debug, Default)]
pub(crate) struct TrustedProxies {
    ranges: Vec<IpNet>,
    header: ClientAddressHeader,
}

/// The one forwarding header that names the client behind trusted proxies
/// ([`PartnerApi::with_client_address_header`](crate::PartnerApi::with_client_address_header)):
/// the one the proxies in front of the API write. The other is ignored, so a client cannot
/// choose its own address by sending the header its proxy does not overwrite.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For` (nginx's `$proxy_add_x_forwarded_for`, most load balancers): the
    /// default.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239: HAProxy's `option forwarded`, nginx's
    /// `proxy_set_header Forwarded`).
    Forwarded,
}

impl ClientAddressHeader {
    /// The header's name, as the standalone host's `--client-address-header` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }
}

impl std::fmt::Display for ClientAddressHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ClientAddressHeader {
    type Err = String;

    /// `x-forwarded-for` or `forwarded`, in any case.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            Ok(Self::XForwardedFor)
        } else if name.eq_ignore_ascii_case("forwarded") {
            Ok(Self::Forwarded)
        } else {
            Err(format!(
                "{name:?} is not a forwarding header: x-forwarded-for or forwarded"
            ))
        }
    }
}

/// The client's address as the API sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientAddr {
    /// The peer, or the address a trusted proxy reported.
    Known(IpAddr),
    /// A trusted proxy sent a forwarding header that does not parse (the proxy's address).
    Unparseable(IpAddr),
}

impl TrustedProxies {
    pub(crate) fn new(ranges: Vec<IpNet>) -> Self {
        Self {
            ranges,
            header: ClientAddressHeader::default(),
        }
    }

    /// These proxies, naming the client in `header` (the other header is ignored).
    pub(crate) fn with_header(mut self, header: ClientAddressHeader) -> Self {
        self.header = header;
        self
    }

    /// The header the client is read from.
    pub(crate) fn header(&self) -> ClientAddressHeader {
        self.header
    }

    fn trusts(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.ranges.iter().any(|range| range.contains(&address))
    }

    /// The client's address for a request from `peer` with these `headers`: the peer; or,
    /// when the peer is a trusted proxy and it forwarded the request, the rightmost
    /// forwarded address that is not a trusted proxy (the leftmost ones are the client's
    /// word, which anyone can forge). `None` when the host passed no peer.
    pub(crate) fn client_addr(
        &self,
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
    ) -> Option<ClientAddr> {
        let peer = canonical(peer?.ip());
        if self.ranges.is_empty() || !self.trusts(peer) {
            return Some(ClientAddr::Known(peer));
        }
        let Some(hops) = forwarded_hops(headers, self.header) else {
            return Some(ClientAddr::Unparseable(peer));
        };
        // Walks from the nearest hop outwards, past every trusted proxy.
        let mut client = peer;
        for hop in hops.into_iter().rev() {
            client = canonical(hop);
            if !self.trusts(client) {
                break;
            }
        }
        Some(ClientAddr::Known(client))
    }
}

impl ClientAddr {
    /// The name of this client's budget of failed authentications: the address, an IPv6
    /// one by its /64 (the smallest block a host is given, so one attacker is one budget);
    /// through a trusted proxy that sent a header that does not parse, that proxy's own
    /// budget.
    pub(crate) fn budget_name(self) -> Box<str> {
        match self {
            Self::Known(IpAddr::V4(address)) => address.to_string().into(),
            Self::Known(IpAddr::V6(address)) => {
                let network = u128::from(address) & !((1_u128 << 64) - 1);
                format!("{}/64", Ipv6Addr::from(network)).into()
            }
            Self::Unparseable(proxy) => format!("unparseable-via-{proxy}").into(),
        }
    }
}

/// The addresses the proxies reported in `header`, nearest last: every `X-Forwarded-For`, or
/// every `Forwarded` `for=`, in order; `None` when there is no such header or one of its
/// addresses does not parse. The other header is never read.
fn forwarded_hops(headers: &HeaderMap, header: ClientAddressHeader) -> Option<Vec<IpAddr>> {
    let mut hops = Vec::new();
    if header == ClientAddressHeader::XForwardedFor {
        for value in headers.get_all(X_FORWARDED_FOR) {
            for hop in value.to_str().ok()?.split(',') {
                hops.push(parse_hop(hop.trim())?);
            }
        }
    } else {
        for value in headers.get_all(FORWARDED) {
            for element in value.to_str().ok()?.split(',') {
                let node = element.split(';').find_map(|pair| {
                    let (name, value) = pair.trim().split_once('=')?;
                    name.eq_ignore_ascii_case("for").then_some(value)
                })?;
                hops.push(parse_hop(node.trim_matches('"'))?);
            }
        }
    }
    (!hops.is_empty()).then_some(hops)
}

/// One hop's address: `192.0.2.1`, `192.0.2.1:8080`, `[2001:db8::1]` or
/// `[2001:db8::1]:8080`, or a bare IPv6 address.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(address) = hop.parse::<IpAddr>() {
        return Some(address);
    }
    if let Ok(socket) = hop.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: &str, headers: &[(&str, &str)]) -> (Option<SocketAddr>, HeaderMap) {
        let peer = Some(peer.parse().unwrap());
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        (peer, map)
    }

    fn proxies(ranges: &[&str]) -> TrustedProxies {
        TrustedProxies::new(ranges.iter().map(|range| range.parse().unwrap()).collect())
    }

    fn addr(text: &str) -> ClientAddr {
        ClientAddr::Known(text.parse().unwrap())
    }

    fn known(text: &str) -> Option<ClientAddr> {
        Some(addr(text))
    }

    #[test]
    fn the_peer_is_the_client_unless_it_is_a_trusted_proxy() {
        let forged = [("x-forwarded-for", "203.0.113.9")];
        let (peer, headers) = request("198.51.100.1:4000", &forged);
        assert_eq!(
            TrustedProxies::default().client_addr(peer, &headers),
            known("198.51.100.1")
        );
        assert_eq!(
            proxies(&["10.0.0.0/8"]).client_addr(peer, &headers),
            known("198.51.100.1"),
            "an untrusted peer's header is ignored"
        );
        assert_eq!(TrustedProxies::default().client_addr(None, &headers), None);
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let (peer, headers) = request(
            "10.0.0.2:4000",
            &[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.7")],
        );
        assert_eq!(trusted.client_addr(peer, &headers), known("203.0.113.9"));
        let (peer, headers) = request(
            "10.0.0.2:4000",
            &[(
                "forwarded",
                "for=1.1.1.1, for=\"[2001:db8::1]:443\";proto=https",
            )],
        );
        let forwarded = trusted.clone().with_header(ClientAddressHeader::Forwarded);
        assert_eq!(forwarded.client_addr(peer, &headers), known("2001:db8::1"));
        let (peer, headers) = request("10.0.0.2:4000", &[]);
        assert_eq!(
            trusted.client_addr(peer, &headers),
            Some(ClientAddr::Unparseable("10.0.0.2".parse().unwrap()))
        );
        let (peer, headers) = request("10.0.0.2:4000", &[("x-forwarded-for", "1.1.1.1, junk")]);
        assert_eq!(
            trusted.client_addr(peer, &headers),
            Some(ClientAddr::Unparseable("10.0.0.2".parse().unwrap()))
        );
        let (peer, headers) = request("[::ffff:10.0.0.2]:4000", &[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(trusted.client_addr(peer, &headers), known("1.1.1.1"));
    }

    #[test]
    fn budgets_are_per_address_and_per_ipv6_slash_64() {
        assert_eq!(&*addr("192.0.2.7").budget_name(), "192.0.2.7");
        assert_eq!(
            addr("2001:db8:1:2:aaaa::1").budget_name(),
            addr("2001:db8:1:2:bbbb::9").budget_name()
        );
        assert_ne!(
            addr("2001:db8:1:2::1").budget_name(),
            addr("2001:db8:1:3::1").budget_name()
        );
    }

    #[test]
    fn only_the_named_forwarding_header_is_read_whatever_the_other_says() {
        // A proxy that writes one header passes the client's own copy of the other through.
        let both = [
            ("x-forwarded-for", "198.51.100.7"),
            ("forwarded", "for=203.0.113.5"),
        ];
        let (peer, headers) = request("10.0.0.2:4000", &both);
        let trusted = proxies(&["10.0.0.0/8"]);
        assert_eq!(trusted.client_addr(peer, &headers), known("198.51.100.7"));
        let forwarded = trusted.clone().with_header(ClientAddressHeader::Forwarded);
        assert_eq!(forwarded.client_addr(peer, &headers), known("203.0.113.5"));
        // The named header missing, the other present: unknown, never the other's word.
        let (peer, headers) = request("10.0.0.2:4000", &both[..1]);
        assert_eq!(
            forwarded.client_addr(peer, &headers),
            Some(ClientAddr::Unparseable("10.0.0.2".parse().unwrap()))
        );
        let (peer, headers) = request("10.0.0.2:4000", &both[1..]);
        assert_eq!(
            trusted.client_addr(peer, &headers),
            Some(ClientAddr::Unparseable("10.0.0.2".parse().unwrap()))
        );
    }

    #[test]
    fn the_header_is_named_as_the_command_line_names_it() {
        for header in [
            ClientAddressHeader::XForwardedFor,
            ClientAddressHeader::Forwarded,
        ] {
            assert_eq!(header.name().parse::<ClientAddressHeader>(), Ok(header));
            assert_eq!(header.to_string().to_uppercase().parse(), Ok(header));
        }
        assert!("x-real-ip".parse::<ClientAddressHeader>().is_err());
        assert_eq!(
            ClientAddressHeader::default(),
            ClientAddressHeader::XForwardedFor
        );
    }
}
