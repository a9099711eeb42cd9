//! Keys pinned to address ranges: a 403 from anywhere else, after the 401s and before the rate
//! limit; over real sockets from 127.0.0.1, 127.0.0.2 and ::1, through trusted and untrusted
//! proxies, managed with `keys issue --allow-ip` and `keys restrict`.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::common::*;
use http::{Request, StatusCode};
use partner_api::key::{AllowedIps, KeyEnvironment};
use partner_api::store::{KeyManager, NewKey};
use partner_api::{LocalRateLimiter, PartnerApi, PeerAddr};

fn from(address: &str, path: &str, key: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut request = get(path, Some(key));
    for (name, value) in headers {
        request.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let peer = SocketAddr::new(address.parse().unwrap(), 40_000);
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

async fn pinned(store: &partner_api::MemoryStore, ranges: &[&str]) -> String {
    let issued = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live).with_allowed_ips(AllowedIps::parse(ranges).unwrap()),
        )
        .await
        .unwrap();
    issued.plaintext().to_owned()
}

#[tokio::test]
async fn a_pinned_key_is_served_inside_its_ranges_and_refused_outside_them() {
    let store = store();
    let limiter = LocalRateLimiter::new(Duration::from_secs(3600), NonZeroU32::new(5).unwrap());
    let api = PartnerApi::from_store(store.clone())
        .with_events(store.clone())
        .with_rate_limiter(limiter);
    let key = pinned(&store, &["192.0.2.0/24", "2001:db8::/48"]).await;

    for path in KEYED_ROUTES {
        let refused = call(&api, from("198.51.100.7", path, &key, &[])).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(
            refused.error_message(),
            "this API key may not be used from this address"
        );
        let body = String::from_utf8_lossy(&refused.body).into_owned();
        assert!(
            !body.contains("192.0.2") && !body.contains("2001:db8"),
            "{body}"
        );
        assert!(refused.header("www-authenticate").is_none());
        assert!(
            refused.header("x-ratelimit-remaining").is_none(),
            "checked before the rate limit"
        );
    }
    // Many refusals spent none of the key's budget of five.
    for _ in 0..5 {
        call(&api, from("198.51.100.7", "/v1/me", &key, &[])).await;
    }
    let served = call(&api, from("192.0.2.44", "/v1/me", &key, &[])).await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.header("x-ratelimit-remaining"), Some("4"));
    let v6 = call(&api, from("2001:db8:0:ffff::9", "/v1/orders", &key, &[])).await;
    assert_eq!(v6.status, StatusCode::OK);
    let mapped = call(&api, from("::ffff:192.0.2.1", "/v1/me", &key, &[])).await;
    assert_eq!(mapped.status, StatusCode::OK, "an IPv4-mapped peer is IPv4");

    // Without a client address a pinned key cannot be checked: refused. Unpinned keys work.
    assert_eq!(
        call(&api, get("/v1/me", Some(&key))).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(&api, get("/v1/me", Some(KEY_A))).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_service_made_for_one_connection_knows_its_peer_and_an_extension_wins() {
    let store = store();
    let key = pinned(&store, &["192.0.2.0/24"]).await;
    let api = PartnerApi::from_store(store.clone());
    let inside = api
        .clone()
        .with_peer_addr(SocketAddr::new("192.0.2.9".parse().unwrap(), 40_000));
    let outside = api.with_peer_addr(SocketAddr::new("198.51.100.7".parse().unwrap(), 40_000));
    assert_eq!(
        call(&inside, get("/v1/me", Some(&key))).await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(&outside, get("/v1/me", Some(&key))).await.status,
        StatusCode::FORBIDDEN
    );
    // A request's own PeerAddr (say, from a PROXY protocol layer) is the one believed.
    assert_eq!(
        call(&outside, from("192.0.2.44", "/v1/me", &key, &[]))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        call(&inside, from("198.51.100.7", "/v1/me", &key, &[]))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn revocation_and_expiry_come_before_the_address() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    let issued = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live)
                .with_allowed_ips(AllowedIps::parse(["192.0.2.0/24"]).unwrap()),
        )
        .await
        .unwrap();
    store.revoke("org_a", &issued.record().id).await.unwrap();
    let refused = call(
        &api,
        from("198.51.100.7", "/v1/me", issued.plaintext(), &[]),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_restriction_changed_or_lifted_holds_from_the_next_request() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    let issued = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let key = issued.plaintext();
    let id = &issued.record().id;
    assert_eq!(
        call(&api, from("198.51.100.7", "/v1/me", key, &[]))
            .await
            .status,
        StatusCode::OK
    );
    store
        .restrict("org_a", id, AllowedIps::parse(["192.0.2.1"]).unwrap())
        .await
        .unwrap();
    assert_eq!(
        call(&api, from("198.51.100.7", "/v1/me", key, &[]))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    store
        .restrict("org_a", id, AllowedIps::any())
        .await
        .unwrap();
    assert_eq!(
        call(&api, from("198.51.100.7", "/v1/me", key, &[]))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn forwarding_headers_count_only_from_trusted_proxies() {
    let store = store();
    let api =
        PartnerApi::from_store(store.clone()).with_trusted_proxies(["10.0.0.0/8".parse().unwrap()]);
    let key = pinned(&store, &["203.0.113.9"]).await;
    let status = |peer: &'static str, headers: &'static [(&'static str, &'static str)]| {
        let api = api.clone();
        let key = key.clone();
        async move { call(&api, from(peer, "/v1/me", &key, headers)).await.status }
    };
    // Through the trusted proxy, the rightmost untrusted hop is the client.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], StatusCode);
    let cases: [Case<'_>; 7] = [
        (
            "10.0.0.2",
            &[("x-forwarded-for", "203.0.113.9")],
            StatusCode::OK,
        ),
        (
            "10.0.0.2",
            &[("x-forwarded-for", "203.0.113.9, 10.0.0.7")],
            StatusCode::OK,
        ),
        // `Forwarded` is read only where it is the named header (not the default).
        (
            "10.0.0.2",
            &[("forwarded", "for=\"203.0.113.9:4431\";proto=https")],
            StatusCode::FORBIDDEN,
        ),
        // The client's own forged leftmost entry does not count.
        (
            "10.0.0.2",
            &[("x-forwarded-for", "203.0.113.9, 198.51.100.7")],
            StatusCode::FORBIDDEN,
        ),
        // Unparseable or missing: outside every range.
        (
            "10.0.0.2",
            &[("x-forwarded-for", "203.0.113.9, not-an-address")],
            StatusCode::FORBIDDEN,
        ),
        ("10.0.0.2", &[], StatusCode::FORBIDDEN),
        // An untrusted peer's header is ignored: the peer is the client.
        (
            "198.51.100.7",
            &[("x-forwarded-for", "203.0.113.9")],
            StatusCode::FORBIDDEN,
        ),
    ];
    for (peer, headers, expected) in cases {
        assert_eq!(status(peer, headers).await, expected, "{peer} {headers:?}");
    }
}

#[cfg(feature = "postgres")]
/// `GET /v1/me` with `key` over a fresh connection from `local` to `address`.
async fn me_from(local: &str, address: SocketAddr, key: &str, extra: &str) -> u16 {
    crate::common::net::me_status_from(Some(local), address, key, extra).await
}

#[cfg(feature = "postgres")]
/// Polls until `key` answers `expected` from `local` (a change reaches the host's cache
/// through PostgreSQL's notifications within the revocation bound).
async fn eventually(local: &str, address: SocketAddr, key: &str, expected: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let status = me_from(local, address, key, "").await;
        if status == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{local}: {status}, not {expected}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(feature = "postgres")]
fn ipv6_loopback() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn over_real_sockets_the_standalone_host_pins_keys_to_addresses() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = crate::common::pg::fresh_database().await;
    let store = partner_api::PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store
        .load_seed(&partner_api::seed::Seed::demo())
        .await
        .unwrap();
    let keys = |args: &[&str]| {
        let mut command = std::process::Command::new(standalone_binary());
        command
            .arg("keys")
            .args(args)
            .args(["--database-url", &url])
            .env_remove("DATABASE_URL");
        command.output().unwrap()
    };
    let issued = keys(&[
        "issue",
        "--organization",
        "org_demo",
        "--allow-ip",
        "127.0.0.2/32",
        "--allow-ip",
        "::1",
    ]);
    assert!(issued.status.success(), "{issued:?}");
    let stdout = String::from_utf8(issued.stdout).unwrap();
    let mut lines = stdout.lines();
    let key = lines.next().unwrap().to_owned();
    let record: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        record["allowedIps"],
        serde_json::json!(["127.0.0.2/32", "::1/128"])
    );
    let id = record["id"].as_str().unwrap().to_owned();
    // A range with host bits is refused before anything is stored.
    let refused = keys(&[
        "issue",
        "--organization",
        "org_demo",
        "--allow-ip",
        "10.1.2.3/8",
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("10.0.0.0/8"));

    let mut host = Process::spawn(&["--listen", "127.0.0.1:0", "--database-url", &url]);
    let address = host.address().await;
    assert_eq!(me_from("127.0.0.1", address, &key, "").await, 403);
    assert_eq!(me_from("127.0.0.2", address, &key, "").await, 200);
    assert_eq!(
        me_from("127.0.0.1", address, &key, "X-Forwarded-For: 127.0.0.2\r\n").await,
        403,
        "a header from an untrusted peer is ignored"
    );

    // Lifted, then pinned elsewhere, through the command: the running host follows.
    let lifted = keys(&["restrict", "--organization", "org_demo", "--id", &id]);
    assert!(lifted.status.success(), "{lifted:?}");
    let record: serde_json::Value =
        serde_json::from_str(String::from_utf8(lifted.stdout).unwrap().trim()).unwrap();
    assert_eq!(record["allowedIps"], serde_json::json!([]));
    eventually("127.0.0.1", address, &key, 200).await;
    let moved = keys(&[
        "restrict",
        "--organization",
        "org_demo",
        "--id",
        &id,
        "--allow-ip",
        "127.0.0.3",
    ]);
    assert!(moved.status.success(), "{moved:?}");
    eventually("127.0.0.2", address, &key, 403).await;
    assert_eq!(me_from("127.0.0.3", address, &key, "").await, 200);
    host.terminate().await;

    // Behind a trusted proxy (here 127.0.0.1), the forwarded address is the client.
    let mut proxied = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &url,
        "--trusted-proxy",
        "127.0.0.1/32",
    ]);
    let address = proxied.address().await;
    assert_eq!(
        me_from("127.0.0.1", address, &key, "X-Forwarded-For: 127.0.0.3\r\n").await,
        200
    );
    assert_eq!(
        me_from(
            "127.0.0.1",
            address,
            &key,
            "X-Forwarded-For: 127.0.0.3, 127.0.0.9\r\n"
        )
        .await,
        403,
        "the rightmost untrusted hop is the client"
    );
    assert_eq!(
        me_from("127.0.0.1", address, &key, "X-Forwarded-For: junk\r\n").await,
        403
    );
    assert_eq!(
        me_from("127.0.0.4", address, &key, "X-Forwarded-For: 127.0.0.3\r\n").await,
        403,
        "127.0.0.4 is no trusted proxy"
    );
    proxied.terminate().await;

    // IPv6: a key pinned to ::1 over an IPv6 listener.
    if !ipv6_loopback() {
        eprintln!("no IPv6 loopback on this machine: the ::1 case did not run");
        return;
    }
    let pinned_v6 = keys(&[
        "restrict",
        "--organization",
        "org_demo",
        "--id",
        &id,
        "--allow-ip",
        "::1",
    ]);
    assert!(pinned_v6.status.success(), "{pinned_v6:?}");
    let mut v6 = Process::spawn(&["--listen", "[::1]:0", "--database-url", &url]);
    let address = v6.address().await;
    assert!(address.ip().is_ipv6(), "{address}");
    assert_eq!(me_from("::1", address, &key, "").await, 200);
    keys(&[
        "restrict",
        "--organization",
        "org_demo",
        "--id",
        &id,
        "--allow-ip",
        "2001:db8::/32",
    ]);
    eventually("::1", address, &key, 403).await;
    v6.terminate().await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn over_real_sockets_only_the_named_forwarding_header_names_the_client() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = crate::common::pg::fresh_database().await;
    let store = partner_api::PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store
        .load_seed(&partner_api::seed::Seed::demo())
        .await
        .unwrap();
    let issued = store
        .issue(
            "org_demo",
            NewKey::new(KeyEnvironment::Test)
                .with_allowed_ips(AllowedIps::parse(["198.51.100.7/32"]).unwrap()),
        )
        .await
        .unwrap();
    let key = issued.plaintext().to_owned();
    // The client sends the header its proxy does not write; the proxy (127.0.0.1, trusted)
    // writes the other one with the client's real address.
    let forwarded_by_proxy = "Forwarded: for=203.0.113.5\r\nX-Forwarded-For: 198.51.100.7\r\n";
    let xff_by_proxy = "Forwarded: for=198.51.100.7\r\nX-Forwarded-For: 203.0.113.5\r\n";
    for (header, refused, served) in [
        ("forwarded", forwarded_by_proxy, xff_by_proxy),
        ("x-forwarded-for", xff_by_proxy, forwarded_by_proxy),
    ] {
        let mut host = Process::spawn(&[
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &url,
            "--no-migrate",
            "--trusted-proxy",
            "127.0.0.0/8",
            "--client-address-header",
            header,
        ]);
        let address = host.address().await;
        assert_eq!(
            me_from("127.0.0.1", address, &key, refused).await,
            403,
            "{header}: the client named its own address in the other header"
        );
        assert_eq!(
            me_from("127.0.0.1", address, &key, served).await,
            200,
            "{header}: the proxy's header was not believed"
        );
        host.terminate().await;
    }
    // Anything else is refused at start, naming both.
    let output = std::process::Command::new(standalone_binary())
        .args(["--client-address-header", "x-real-ip"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("x-forwarded-for or forwarded"), "{stderr}");
}
