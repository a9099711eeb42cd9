//! Hostile clients against the standalone host, over real sockets on loopback (clients bind
//! 127.0.0.2 and 127.0.0.3 to be other addresses): one address cannot hold every connection,
//! pings do not keep a connection, connections end at their maximum age, and a flood of
//! made-up keys is throttled before it reaches the database.
#![cfg(feature = "postgres")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::net::*;
use crate::common::pg::fresh_database;
use crate::common::*;

/// A connection to `server` from the loopback address `local`.
async fn connect_from(local: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    socket.connect(server).await.unwrap()
}

/// Sends `GET path` with `key` on `stream` and reads the response: its status, or `None`
/// when the connection closed first.
async fn exchange(stream: &mut TcpStream, path: &str, key: &str) -> Option<u16> {
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    read_response(stream).await
}

/// Reads one HTTP/1.1 response with a `content-length`: its status, or `None` at a close.
async fn read_response(stream: &mut TcpStream) -> Option<u16> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
    let status: u16 = head.get(9..12)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse().unwrap_or(0));
    while buffer.len() < head_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Some(status)
}

#[tokio::test]
async fn a_client_holding_its_sockets_busy_cannot_keep_another_address_out() {
    crate::common::needs::needs!(Examples);
    let mut process = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--max-connections",
        "8",
        "--max-connections-per-ip",
        "4",
    ]);
    let address = process.address().await;
    let key = partner_api::seed::DEMO_KEY;
    // 127.0.0.1 opens every slot it can and keeps each busy with requests.
    let mut hog = Vec::new();
    for _ in 0..8 {
        hog.push(connect_from("127.0.0.1", address).await);
    }
    let mut served = 0;
    let mut closed = 0;
    for stream in &mut hog {
        match exchange(stream, "/v1/me", key).await {
            Some(200) => served += 1,
            None => closed += 1,
            Some(status) => panic!("status {status}"),
        }
    }
    assert_eq!(
        (served, closed),
        (4, 4),
        "four connections per address, the rest closed"
    );
    let mut busy: Vec<TcpStream> = Vec::new();
    for mut stream in hog {
        if exchange(&mut stream, "/v1/me", key).await == Some(200) {
            busy.push(stream);
        }
    }
    let keep_busy = tokio::spawn(async move {
        for _ in 0..50 {
            for stream in &mut busy {
                exchange(stream, "/v1/me", key).await;
            }
        }
        busy
    });
    // Another address is served at once, while the first keeps its share busy.
    let started = Instant::now();
    let mut other = connect_from("127.0.0.2", address).await;
    assert_eq!(exchange(&mut other, "/v1/me", key).await, Some(200));
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "another address waited {waited:?}"
    );
    let busy = keep_busy.await.unwrap();
    assert_eq!(busy.len(), 4);
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn http2_pings_do_not_keep_an_idle_connection_open() {
    crate::common::needs::needs!(Examples);
    let mut process = Process::spawn(&["--listen", "127.0.0.1:0", "--idle-timeout", "1"]);
    let address = process.address().await;
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(Duration::from_millis(200))
            .keep_alive_while_idle(true)
            .handshake::<_, http_body_util::Empty<bytes::Bytes>>(hyper_util::rt::TokioIo::new(
                stream,
            ))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{address}/v1/me"))
        .header(
            "authorization",
            format!("Bearer {}", partner_api::seed::DEMO_KEY),
        )
        .body(http_body_util::Empty::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    // Pinging every 200 ms, the connection is still closed once idle for the timeout.
    let ended = tokio::time::timeout(Duration::from_secs(10), connection).await;
    assert!(ended.is_ok(), "pings kept an idle HTTP/2 connection open");
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn a_busy_connection_is_closed_gracefully_at_its_maximum_age() {
    crate::common::needs::needs!(Examples);
    let mut process = Process::spawn(&["--listen", "127.0.0.1:0", "--max-connection-age", "1"]);
    let address = process.address().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let started = Instant::now();
    let mut answered = 0;
    // Requests one after another: each is answered, then the connection ends.
    let closed = loop {
        match exchange(&mut stream, "/v1/me", partner_api::seed::DEMO_KEY).await {
            Some(200) => answered += 1,
            Some(status) => panic!("status {status}"),
            None => break started.elapsed(),
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "a connection outlived its maximum age"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(answered > 1, "only {answered} requests before the close");
    assert!(
        closed >= Duration::from_millis(900),
        "closed after {closed:?}"
    );
    // A new connection is served.
    let mut fresh = TcpStream::connect(address).await.unwrap();
    assert_eq!(
        exchange(&mut fresh, "/v1/me", partner_api::seed::DEMO_KEY).await,
        Some(200)
    );
    assert!(process.terminate().await.success());
}

/// A fresh random 40-character token that is not of our format (so no checksum spares the
/// look-up).
fn random_token(seed: &mut u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..40)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            char::from(ALPHABET[(*seed % ALPHABET.len() as u64) as usize])
        })
        .collect()
}

#[tokio::test]
async fn a_flood_of_made_up_keys_is_throttled_before_the_database() {
    crate::common::needs::needs!(Postgres, Examples);
    let (mut process, address, _store) =
        host_on_a_fresh_database(&["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics_url = process
        .line()
        .await
        .strip_prefix("metrics on ")
        .unwrap()
        .to_owned();
    // The valid key's quiet latency, then under the flood.
    let mut valid = connect_from("127.0.0.3", address).await;
    let key = partner_api::seed::DEMO_KEY;
    assert_eq!(exchange(&mut valid, "/v1/orders", key).await, Some(200));
    let mut quiet = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        assert_eq!(exchange(&mut valid, "/v1/orders", key).await, Some(200));
        quiet.push(started.elapsed());
    }
    let flood_started = Instant::now();
    let mut flooders = Vec::new();
    for connection in 0..32_u64 {
        flooders.push(tokio::spawn(async move {
            let mut stream = connect_from("127.0.0.3", address).await;
            let mut seed = 0x9E37_79B9_7F4A_7C15 ^ (connection + 1);
            let mut statuses = Vec::new();
            for _ in 0..157 {
                let token = random_token(&mut seed);
                match exchange(&mut stream, "/v1/orders", &token).await {
                    Some(status) => statuses.push(status),
                    None => {
                        stream = connect_from("127.0.0.3", address).await;
                    }
                }
            }
            statuses
        }));
    }
    let mut loaded = Vec::new();
    while flooders.iter().any(|flooder| !flooder.is_finished()) {
        let started = Instant::now();
        let status = exchange(&mut valid, "/v1/orders", key).await;
        loaded.push(started.elapsed());
        assert_eq!(status, Some(200), "a valid key was refused under the flood");
    }
    let mut statuses = Vec::new();
    for flooder in flooders {
        statuses.extend(flooder.await.unwrap());
    }
    let elapsed = flood_started.elapsed();
    let unauthorized = statuses.iter().filter(|&&status| status == 401).count();
    let throttled = statuses.iter().filter(|&&status| status == 429).count();
    assert_eq!(
        unauthorized + throttled,
        statuses.len(),
        "every made-up key is a 401 or a 429"
    );
    assert!(statuses.len() >= 4_900, "{} answers", statuses.len());
    // What reached the database: each look-up of a made-up key is one failure of reason
    // `unknown`; throttled ones never looked up. The budget: a burst of 200 and 20 a second.
    let exposition =
        String::from_utf8(get_unchecked(&http1(), &metrics_url).await.body.to_vec()).unwrap();
    let samples = samples(&exposition);
    let looked_up = sum_of(
        &samples,
        "partner_api_auth_failures_total",
        &[("reason", "unknown")],
    );
    let budget = 200.0 + 20.0 * elapsed.as_secs_f64().ceil();
    assert!(
        looked_up <= budget,
        "{looked_up} look-ups of made-up keys in {elapsed:?}, over the budget of {budget}"
    );
    assert_eq!(looked_up as usize, unauthorized);
    assert!(throttled > 0 && loaded.len() > 1);
    quiet.sort();
    loaded.sort();
    let p99 = |sorted: &[Duration]| sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
    println!(
        "flood: {} answers in {elapsed:?} ({unauthorized} 401, {throttled} 429), {looked_up} \
         look-ups; valid key p99 quiet {:?}, under the flood {:?} ({} calls)",
        statuses.len(),
        p99(&quiet),
        p99(&loaded),
        loaded.len()
    );
    assert!(process.terminate().await.success());
}

/// The standalone host on a fresh seeded database with `args`, and its address.
async fn host_on_a_fresh_database(args: &[&str]) -> (Process, SocketAddr, partner_api::PgStore) {
    let url = fresh_database().await;
    let store = partner_api::PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store
        .load_seed(&partner_api::seed::Seed::demo())
        .await
        .unwrap();
    let mut all = vec!["--listen", "127.0.0.1:0", "--database-url", &url];
    all.extend_from_slice(args);
    let mut process = Process::spawn(&all);
    let address = process.address().await;
    (process, address, store)
}

/// Sends `count` fresh made-up tokens from `local` on one connection: their statuses.
async fn bad_tokens(local: &str, address: SocketAddr, count: usize, seed: &mut u64) -> Vec<u16> {
    let mut stream = connect_from(local, address).await;
    let mut statuses = Vec::new();
    for _ in 0..count {
        let token = random_token(seed);
        statuses.push(exchange(&mut stream, "/v1/me", &token).await.unwrap());
    }
    statuses
}

#[tokio::test]
async fn a_valid_key_is_served_behind_its_neighbours_failures() {
    crate::common::needs::needs!(Postgres, Examples);
    for cache in [&[][..], &["--no-cache"][..]] {
        let mut args = vec!["--auth-failure-limit", "1"];
        args.extend_from_slice(cache);
        let (process, address, store) = host_on_a_fresh_database(&args).await;
        let mut seed = 0x2545_F491_4F6C_DD1D;
        // 40 failures from 127.0.0.3 spend its budget (a burst of 10): 429s.
        let statuses = bad_tokens("127.0.0.3", address, 40, &mut seed).await;
        assert!(statuses.contains(&429), "{cache:?}: {statuses:?}");
        // The partner's valid key from the same address, never asked for before (so in no
        // cache): served.
        let mut partner = connect_from("127.0.0.3", address).await;
        assert_eq!(
            exchange(&mut partner, "/v1/me", partner_api::seed::DEMO_KEY).await,
            Some(200),
            "{cache:?}: a valid key refused for its neighbours' failures"
        );
        // A key issued after the start (by another process, as `keys issue` does) is known
        // once its notification arrives: served behind failures too. Asked until then
        // (before, it is throttled as any token is: a 429).
        let issued = partner_api::store::KeyManager::issue(
            &store,
            "org_demo",
            partner_api::store::NewKey::new(partner_api::key::KeyEnvironment::Test),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The budget refills one a second: these spend what came back.
            let statuses = bad_tokens("127.0.0.3", address, 3, &mut seed).await;
            assert!(
                statuses.iter().all(|status| [401, 429].contains(status)),
                "{cache:?}: {statuses:?}"
            );
            let status = exchange(&mut partner, "/v1/me", issued.plaintext()).await;
            if status == Some(200) {
                break;
            }
            assert_eq!(status, Some(429), "{cache:?}");
            assert!(
                Instant::now() < deadline,
                "{cache:?}: a new key never became known"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A revoked key is refused (within the bound), its failure charged, and from then on
        // throttled like any token: 401 or 429, never the database past the budget.
        partner_api::store::KeyManager::revoke(&store, "org_demo", &issued.record().id)
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = exchange(&mut partner, "/v1/me", issued.plaintext()).await;
            if matches!(status, Some(401 | 429)) {
                break;
            }
            assert_eq!(status, Some(200), "{cache:?}: revoked, within the bound");
            assert!(
                Instant::now() < deadline,
                "{cache:?}: served past the bound"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(process.terminate().await.success());
    }
}
