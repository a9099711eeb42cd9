//! A flood of made-up keys against the standalone host on PostgreSQL: 5,000 fresh random
//! 40-character tokens over 32 keep-alive connections, in each round twice:
//!
//! - alone, from 127.0.0.4: the statements the database ran in the flood's database
//!   meanwhile (`pg_stat_statements`: every top-level statement of the host, its
//!   listener's and recorders' included);
//! - from 127.0.0.3, while a valid key from the same address (one NAT, one corporate egress)
//!   calls `/v1/orders` one request after another: answered from the key cache in odd rounds,
//!   looked up in the database on every call in even ones (`--no-cache`), where only the
//!   host's known keys keep it from the spent budget. The valid key's p50 and p99 latency
//!   quiet and under the flood, the flood's statuses, and the look-ups the database saw
//!   (failures of reason `unknown` in the host's metrics) against the budget (a burst of 200
//!   and 20 a second).
//!
//! Fails when a valid call is refused, the look-ups exceed the budget, the flood alone costs
//! 1,000 statements or more, or the valid key's p99 under the flood is over twice its quiet
//! p99.
//!
//! The server must load `pg_stat_statements` (Debian's postgresql package has it):
//!
//! ```sh
//! cargo build --release --features postgres --example standalone
//! (source .ci/servers.sh; PARTNER_API_POSTGRES_OPTIONS="-c shared_preload_libraries=pg_stat_statements" \
//!   start_postgres; cargo bench --features postgres --bench auth_flood; stop_servers)
//! ```
//!
//! ROUNDS sets the rounds (default 3); STANDALONE the binary (default the release build).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::PgStore;
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

/// The flood: `FLOOD` fresh random tokens from `from` over `CONNECTIONS` keep-alive
/// connections, each answer's status collected by its connection's task.
fn flood(
    api: SocketAddr,
    from: &'static str,
    seed_base: usize,
) -> Vec<tokio::task::JoinHandle<Vec<u16>>> {
    (0..CONNECTIONS)
        .map(|connection| {
            tokio::spawn(async move {
                let mut stream = connect_from(from, api).await;
                let mut seed = 0x9E37_79B9_7F4A_7C15 ^ ((seed_base + connection + 1) as u64);
                let mut statuses = Vec::new();
                for _ in 0..FLOOD.div_ceil(CONNECTIONS) {
                    let token = random_token(&mut seed);
                    match exchange(&mut stream, "/v1/orders", &token).await {
                        Some(status) => statuses.push(status),
                        None => stream = connect_from(from, api).await,
                    }
                }
                statuses
            })
        })
        .collect()
}

/// The statements the server has run in database `name` (reset by nothing here).
async fn statements_run(connection: &mut PgConnection, name: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)",
    )
    .bind(name)
    .fetch_one(connection)
    .await
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
    let mut statistics = PgConnection::connect(&url).await.expect("connect");
    statistics
        .execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .expect("pg_stat_statements");
    if let Err(err) = statements_run(&mut statistics, &name).await {
        drop(statistics);
        drop(store);
        let _ = connection
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await;
        eprintln!(
            "auth_flood: the server does not load pg_stat_statements ({err}); start it with \
             -c shared_preload_libraries=pg_stat_statements (see the bench's docs)"
        );
        std::process::exit(1);
    }

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

        // The flood alone, from an address of its own: the statements it costs the database
        // (the valid key's own look-ups with --no-cache would drown them).
        let statements_before = statements_run(&mut statistics, &name)
            .await
            .expect("statements");
        let alone = flood(api, "127.0.0.4", round * 1000);
        let mut alone_statuses = Vec::new();
        for flooder in alone {
            alone_statuses.extend(flooder.await.expect("flooder"));
        }
        // This query is counted too: one statement more than the flood's.
        let statements = statements_run(&mut statistics, &name)
            .await
            .expect("statements")
            - statements_before;
        let looked_up_alone = metric(
            &scrape(metrics).await,
            "partner_api_auth_failures_total",
            "reason=\"unknown\"",
        );

        // The flood again, fresh tokens from the valid key's address.
        let started = Instant::now();
        let flooders = flood(api, "127.0.0.3", round * 1000 + 500);
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
        ) - looked_up_alone;
        let budget = 200.0 + 20.0 * elapsed.as_secs_f64().ceil();
        let unauthorized = statuses.iter().filter(|&&s| s == 401).count();
        let throttled = statuses.iter().filter(|&&s| s == 429).count();
        let (quiet_p99, loaded_p99) = (percentile(&quiet, 990), percentile(&loaded, 990));
        println!(
            "round {round}{}: the flood alone: {} tokens, {statements} statements; \
             beside the valid key: {} in {:.2} s ({unauthorized} 401, {throttled} 429), \
             look-ups {looked_up} (budget {budget}); valid key: {} calls under the flood, \
             {refused} refused, p50 {:?} -> {:?}, p99 {quiet_p99:?} -> {loaded_p99:?} ({:.2}x)",
            if no_cache { " (--no-cache)" } else { "" },
            alone_statuses.len(),
            statuses.len(),
            elapsed.as_secs_f64(),
            loaded.len(),
            percentile(&quiet, 500),
            percentile(&loaded, 500),
            loaded_p99.as_secs_f64() / quiet_p99.as_secs_f64(),
        );
        if refused > 0 || looked_up > budget || statements >= 1_000 || loaded_p99 > quiet_p99 * 2 {
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
