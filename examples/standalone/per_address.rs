//! The cap on connections per client: each IPv4 address, and each IPv6 /64 (one client, as the
//! failed-authentication throttle counts it: a host hands a whole /64 to one machine).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// The connections each client holds, for the cap per client.
pub(crate) struct PerAddress {
    max: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl PerAddress {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// One more connection of `address`'s client, held until the guard drops; `None` at the
    /// cap.
    pub(crate) fn enter(self: &Arc<Self>, address: IpAddr) -> Option<AddressGuard> {
        if self.max == 0 {
            return Some(AddressGuard(None));
        }
        let address = client_of(address);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(address).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(AddressGuard(Some((self.clone(), address))))
    }
}

/// One connection of an address, counted in [`PerAddress`] until dropped.
pub(crate) struct AddressGuard(Option<(Arc<PerAddress>, IpAddr)>);

impl Drop for AddressGuard {
    fn drop(&mut self) {
        let Some((per_ip, address)) = self.0.take() else {
            return;
        };
        let mut held = per_ip.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                held.remove(&address);
            }
        }
    }
}

/// The client an address counts as: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), or an
/// IPv6 address's /64.
fn client_of(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1_u128 << 64) - 1))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_one_ipv6_slash_64_share_the_cap() {
        let cap = Arc::new(PerAddress::new(4));
        let held: Vec<AddressGuard> = (1..=4)
            .map(|n| {
                cap.enter(format!("2001:db8:0:1::{n}").parse().unwrap())
                    .unwrap()
            })
            .collect();
        for n in 5..=8 {
            let address: IpAddr = format!("2001:db8:0:1:ffff::{n}").parse().unwrap();
            assert!(cap.enter(address).is_none(), "{address} took a fifth place");
        }
        // Another /64, and IPv4 addresses, count apart.
        assert!(cap.enter("2001:db8:0:2::1".parse().unwrap()).is_some());
        assert!(cap.enter("192.0.2.1".parse().unwrap()).is_some());
        drop(held);
        assert!(cap.enter("2001:db8:0:1::9".parse().unwrap()).is_some());
    }

    #[test]
    fn an_ipv4_mapped_address_counts_as_its_ipv4_address() {
        let cap = Arc::new(PerAddress::new(1));
        let _held = cap.enter("192.0.2.1".parse().unwrap()).unwrap();
        assert!(cap.enter("::ffff:192.0.2.1".parse().unwrap()).is_none());
        assert!(cap.enter("192.0.2.2".parse().unwrap()).is_some());
    }
}
