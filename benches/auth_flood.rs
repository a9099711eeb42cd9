//! A flood of made-up keys against the standalone host on PostgreSQL: 5,000 fresh random
//! 40-character tokens from 127.0.0.3 over 32 connections, while a valid key from the same
//! address (one NAT, one corporate egress) calls `/v1/orders` one request after another:
//! answered from the key cache in odd rounds, looked up in the database on every call in even
//! ones (`--no-cache`), where only the host's known keys keep it from the spent budget. Reports, per round, the valid key's p50 and
//! p99 latency quiet and under the flood, the flood's statuses, and the look-ups the
//! database saw (failures of reason `unknown` in the host's metrics) against the budget
//! (a burst of 200 and 20 a second). Fails when a valid call is refused, the database sees
//! more than the budget, or the valid key's p99 under the flood is over twice its quiet p99.
//!
//! ```sh
//! cargo build --release --features postgres --example standalone
//! PARTNER_API_TEST_DATABASE_URL=postgres://... cargo bench --features postgres --bench auth_flood
//! ```
//!
//! ROUNDS sets the rounds (default 3); STANDALONE the binary (default the release build).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::store::postgres::PgStore;
use sqlx::{Connection, Executor, PgConnection};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

const FLOOD: usize = 5_000;
const CONNECTIONS: usize = 32;

async fn connect_from(local: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{local}:0").parse().expect("address"))
        .expect("bind");
    socket.connect(server).await.expect("connect")
}

/// One keep-alive `GET path` with `key`: the status, or `None` when the connection closed.
async fn exchange(stream: &mut TcpStream, path: &str, key: &str) -> Option<u16> {
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
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
    let status = head.get(9..12)?.parse().ok()?;
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

fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    sorted[(sorted.len() * per_mille / 1000).min(sorted.len() - 1)]
}

/// The sum of the samples of `name` with `label` in a Prometheus exposition.
fn metric(exposition: &str, name: &str, label: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with(name) && line.contains(label))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

async fn scrape(metrics: SocketAddr) -> String {
    let mut stream = TcpStream::connect(metrics).await.expect("metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("read");
    text
}

/// The valid key's latencies over `calls` requests on `stream`.
async fn quiet_round(stream: &mut TcpStream, calls: usize) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let status = exchange(stream, "/v1/orders", DEMO_KEY).await;
        latencies.push(started.elapsed());
        assert_eq!(status, Some(200), "a quiet valid call failed");
    }
    latencies.sort();
    latencies
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("PARTNER_API_TEST_DATABASE_URL") else {
        eprintln!("auth_flood: set PARTNER_API_TEST_DATABASE_URL (benches/load.sh does)");
        return;
    };
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let binary = std::env::var("STANDALONE")
        .unwrap_or_else(|_| "target/release/examples/standalone".to_owned());
    let name = format!("partner_api_flood_{}", std::process::id());
    let mut connection = PgConnection::connect(&admin).await.expect("connect");
    connection
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create database");
    let url = format!("{}/{name}", admin.rsplit_once('/').expect("a URL").0);
    let store = PgStore::connect_lazy(&url).expect("url");
    store.migrate().await.expect("migrate");
    store.load_seed(&Seed::demo()).await.expect("seed");

    let mut failed = false;
    for round in 1..=rounds {
        let no_cache = round % 2 == 0;
        let mut child = tokio::process::Command::new(&binary)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(no_cache.then_some("--no-cache"))
            .args(["--database-url", &url])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("{binary}: {err} (build it first, see the docs)"));
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let listening = lines.next_line().await.expect("read").expect("a line");
        let api: SocketAddr = listening
            .trim_start_matches("listening on http://")
            .split_whitespace()
            .next()
            .and_then(|address| address.parse().ok())
            .unwrap_or_else(|| panic!("{listening}"));
        let metrics_line = lines.next_line().await.expect("read").expect("a line");
        let metrics: SocketAddr = metrics_line
            .trim_start_matches("metrics on http://")
            .trim_end_matches("/metrics")
            .parse()
            .expect("metrics address");

        let mut valid = connect_from("127.0.0.3", api).await;
        quiet_round(&mut valid, 200).await; // warm: the cache knows the key and the page
        let quiet = quiet_round(&mut valid, 10_000).await;

        let started = Instant::now();
        let mut flooders = Vec::new();
        for connection in 0..CONNECTIONS {
            flooders.push(tokio::spawn(async move {
                let mut stream = connect_from("127.0.0.3", api).await;
                let mut seed = 0x9E37_79B9_7F4A_7C15 ^ ((round * 1000 + connection + 1) as u64);
                let mut statuses = Vec::new();
                for _ in 0..FLOOD.div_ceil(CONNECTIONS) {
                    let token = random_token(&mut seed);
                    match exchange(&mut stream, "/v1/orders", &token).await {
                        Some(status) => statuses.push(status),
                        None => stream = connect_from("127.0.0.3", api).await,
                    }
                }
                statuses
            }));
        }
        let mut loaded = Vec::new();
        let mut refused = 0;
        while flooders.iter().any(|flooder| !flooder.is_finished()) {
            let call = Instant::now();
            if exchange(&mut valid, "/v1/orders", DEMO_KEY).await != Some(200) {
                refused += 1;
            }
            loaded.push(call.elapsed());
        }
        let mut statuses = Vec::new();
        for flooder in flooders {
            statuses.extend(flooder.await.expect("flooder"));
        }
        let elapsed = started.elapsed();
        loaded.sort();
        let exposition = scrape(metrics).await;
        let looked_up = metric(
            &exposition,
            "partner_api_auth_failures_total",
            "reason=\"unknown\"",
        );
        let budget = 200.0 + 20.0 * elapsed.as_secs_f64().ceil();
        let unauthorized = statuses.iter().filter(|&&s| s == 401).count();
        let throttled = statuses.iter().filter(|&&s| s == 429).count();
        let (quiet_p99, loaded_p99) = (percentile(&quiet, 990), percentile(&loaded, 990));
        println!(
            "round {round}{}: flood of {} in {:.2} s ({unauthorized} 401, {throttled} 429); \
             look-ups {looked_up} (budget {budget}); valid key: {} calls under the flood, \
             {refused} refused, p50 {:?} -> {:?}, p99 {quiet_p99:?} -> {loaded_p99:?} ({:.2}x)",
            if no_cache { " (--no-cache)" } else { "" },
            statuses.len(),
            elapsed.as_secs_f64(),
            loaded.len(),
            percentile(&quiet, 500),
            percentile(&loaded, 500),
            loaded_p99.as_secs_f64() / quiet_p99.as_secs_f64(),
        );
        if refused > 0 || looked_up > budget || loaded_p99 > quiet_p99 * 2 {
            failed = true;
        }
        let _ = child.kill().await;
    }
    drop(store);
    let _ = connection
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await;
    if failed {
        eprintln!("auth_flood: a round missed its bar (see above)");
        std::process::exit(1);
    }
}
