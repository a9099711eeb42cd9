//! A fresh database per PostgreSQL test, on the server `bash .ci/test` starts.

use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::{Connection, Executor, PgConnection};

/// A fresh, empty database on the test server; its URL.
pub async fn fresh_database() -> String {
    let admin = std::env::var("PARTNER_API_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "the PostgreSQL tests need a server: run them with `bash .ci/test`, which starts \
             one, or set PARTNER_API_TEST_DATABASE_URL to a server where they may create \
             databases (e.g. postgres://postgres@127.0.0.1:5432/postgres)"
        )
    });
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "partner_api_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut connection = PgConnection::connect(&admin)
        .await
        .expect("connect to the test server");
    connection
        .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
        .await
        .unwrap();
    connection
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// The SQL of the roles in the hosting docs, with the role names made unique for a test:
/// serving, key admin, delivering.
pub fn documented_roles([serving, keys, delivering]: [&str; 3]) -> String {
    let docs = include_str!("../../../src/docs/hosting.md");
    let block = docs
        .split("<!-- roles -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /roles -->").next())
        .expect("the roles block of the hosting docs");
    let sql = block
        .trim()
        .strip_prefix("```sql")
        .and_then(|sql| sql.strip_suffix("```"))
        .expect("an SQL block");
    sql.replace("partner_api_serving", serving)
        .replace("partner_api_key_admin", keys)
        .replace("partner_api_delivering", delivering)
}

/// The documented roles, made afresh in the database of `url` (named after it, so tests on
/// the same server keep theirs apart): their names, serving, key admin, delivering.
pub async fn create_documented_roles(url: &str) -> [String; 3] {
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let roles = ["serving", "keys", "delivering"].map(|role| format!("{database}_{role}"));
    let mut admin = PgConnection::connect(url).await.unwrap();
    for role in roles.iter().rev() {
        admin
            .execute(format!("DROP ROLE IF EXISTS {role}").as_str())
            .await
            .unwrap();
    }
    admin
        .execute(documented_roles([&roles[0], &roles[1], &roles[2]]).as_str())
        .await
        .unwrap();
    roles
}

/// A [`fresh_database`] migrated, with `organizations` (each named as its id): its store and
/// URL.
pub async fn migrated_with(organizations: &[&str]) -> (partner_api::PgStore, String) {
    let url = fresh_database().await;
    let store = partner_api::PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    for id in organizations {
        store
            .add_organization(&partner_api::Organization {
                id: (*id).into(),
                name: (*id).into(),
            })
            .await
            .unwrap();
    }
    (store, url)
}

/// `url` with `user` (whose password is `change me`, as in the documented roles) in place of
/// its user.
pub fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}:change%20me@{host}")
}

/// Terminates every cache listener's connection to `connection`'s database (only that
/// database's: the server is shared with the tests running beside it); how many.
pub async fn kill_listeners(connection: &mut PgConnection) -> usize {
    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'partner_api_cache_listener'",
    )
    .fetch_all(connection)
    .await
    .unwrap();
    terminated.len()
}

/// The record of the demo seed's key `DEMO_KEY` (labelled "Demo integration") in `store`.
pub async fn demo_key_record(store: &partner_api::PgStore) -> partner_api::store::KeyRecord {
    use partner_api::store::KeyManager;
    store
        .list("org_demo")
        .await
        .unwrap()
        .into_iter()
        .find(|record| record.label.as_deref() == Some("Demo integration"))
        .expect("the demo seed's key")
}

/// A TCP proxy to a database on a fixed loopback port, which a test can stop (refusing new
/// connections and cutting the open ones) and start again, or stall (connections stay open
/// and nothing is forwarded, as in a network partition).
pub struct Proxy {
    pub port: u16,
    target: String,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How long what the server sends is held, in milliseconds: a query runs at once and its
    /// answer comes that much later.
    answers_delay: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to the server of `url`, and `url` through it.
    pub async fn in_front_of(url: &str) -> (Self, String) {
        let server = url
            .split('@')
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap()
            .to_owned();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut proxy = Self {
            port,
            target: server.clone(),
            stalled: Default::default(),
            answers_delay: Default::default(),
            task: None,
        };
        proxy.resume().await;
        let proxied = url.replace(&server, &format!("127.0.0.1:{port}"));
        (proxy, proxied)
    }

    pub async fn resume(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        let target = self.target.clone();
        let stalled = self.stalled.clone();
        let answers_delay = self.answers_delay.clone();
        self.task = Some(tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let target = target.clone();
                let stalled = stalled.clone();
                let answers_delay = answers_delay.clone();
                connections.spawn(async move {
                    if let Ok(server) = tokio::net::TcpStream::connect(target).await {
                        let (client_read, client_write) = client.into_split();
                        let (server_read, server_write) = server.into_split();
                        tokio::join!(
                            pump(client_read, server_write, stalled.clone(), None),
                            pump(server_read, client_write, stalled, Some(answers_delay))
                        );
                    }
                });
            }
        }));
    }

    /// Stops listening and cuts every connection (the JoinSet aborts them when dropped);
    /// returns once the listener is closed, so that `resume` can bind its port again.
    pub async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Stops (or starts again) forwarding, keeping every connection open.
    pub fn stall(&self, stalled: bool) {
        self.stall_handle().set(stalled);
    }

    /// A handle that stalls this proxy from anywhere (a task that ends a stall, say).
    pub fn stall_handle(&self) -> Stall {
        Stall(self.stalled.clone())
    }

    /// A handle that delays what the server sends: queries run at once and their answers
    /// arrive later, as on a congested path back.
    pub fn answers_delay_handle(&self) -> AnswersDelay {
        AnswersDelay(self.answers_delay.clone())
    }
}

/// Delays what a [`Proxy`]'s server sends.
#[derive(Clone)]
pub struct AnswersDelay(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl AnswersDelay {
    /// Delays each answer by `delay` from now on (zero: no delay).
    pub fn set(&self, delay: std::time::Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.0.store(millis, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Stalls a [`Proxy`]'s connections, or lets them go on.
#[derive(Clone)]
pub struct Stall(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Stall {
    /// Stops (or starts again) forwarding, keeping every connection open.
    pub fn set(&self, stalled: bool) {
        self.0.store(stalled, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes, holding what it read while `stalled`, and
/// each read for `delay` milliseconds (when set) from when it was read.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    delay: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stalled = || stalled.load(std::sync::atomic::Ordering::SeqCst);
    let mut buffer = vec![0; 16 * 1024];
    loop {
        while stalled() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let Ok(read) = from.read(&mut buffer).await else {
            return;
        };
        if read == 0 {
            return;
        }
        let delay = delay
            .as_ref()
            .map_or(0, |delay| delay.load(std::sync::atomic::Ordering::SeqCst));
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        // Read before a stall began: held until it ends, as a partitioned network holds it.
        while stalled() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// What the cache `keys` (of `api`) answers from memory for `key`, asking through `api`
/// (`GET /v1/me`, as a client retrying would) until it does, for at most 10 s.
///
/// A cache answers from memory, and keeps what it reads, only while its listener's evidence
/// is younger than 800 ms; on a loaded machine (a CI run, eight tests at once) heartbeats can
/// come later than that, and the cache then rightly asks the database. So a test asks until the
/// cache answers rather than looking at one instant.
pub async fn remembered(
    api: &partner_api::PartnerApi,
    keys: &impl partner_api::KeyStore,
    key: &str,
) -> partner_api::KeyLookup {
    let digest = partner_api::KeyDigest::of(key);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        super::call(api, super::get("/v1/me", Some(key))).await;
        if let Some(answer) = keys.lookup_now(&digest) {
            return answer.expect("a cache answers from memory without an error");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the cache never answered from memory"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Waits (up to 10 s) until the caches following `notifications` may answer from memory: the
/// listener connected and gave fresh evidence.
pub async fn until_answering(notifications: &partner_api::cache::Notifications) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !notifications.is_connected() {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never connected"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// What the webhooks' dispatcher does before each claim: the feeds of new events made, then
/// a stamping round, which writes their webhooks.
pub async fn stamp_for_webhooks(pool: &sqlx::PgPool) {
    sqlx::query("SELECT partner_api_open_feeds_for_webhooks(100)")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("SELECT partner_api_stamp_for_webhooks(100, 1000)")
        .execute(pool)
        .await
        .unwrap();
}

/// The organizations whose events a trigger wrote with the order's fields (rendered at the
/// stamping, migration `20261212000001_render_at_stamping`) stamped, as the feed's readers and
/// retention do, so that a direct read of the events table finds their snapshots. Only those:
/// a stamping is a transaction the capture decodes too (its rows count in a round's batch).
pub async fn stamp_written(pool: &sqlx::PgPool) {
    sqlx::query(
        "SELECT partner_api_stamp_order_events(u.organization_id, 100000) \
         FROM (SELECT DISTINCT organization_id FROM partner_api_order_events \
               WHERE position IS NULL AND new_created_at IS NOT NULL) u",
    )
    .execute(pool)
    .await
    .unwrap();
}
