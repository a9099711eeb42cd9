//! The command line: what to serve, from where, and how (the subcommands' flags are in
//! `commands.rs`, re-exported here).

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[cfg(all(feature = "postgres", feature = "webhooks"))]
pub(crate) use crate::commands::WebhooksAction;
pub(crate) use crate::commands::{AuditArgs, Command, KeysAction};

/// Serve the partner API, or manage its keys.
#[derive(Parser, Debug)]
#[command(version, about)]
pub(crate) struct Args {
    /// What to do instead of serving.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: String,
    /// JSON seed file of organizations, API keys and orders (default: built-in demo data;
    /// with a database: none).
    #[arg(long)]
    pub(crate) seed: Option<PathBuf>,
    /// Serve from (or manage the keys of) PostgreSQL at this URL, migrated at start unless
    /// --no-migrate, instead of memory.
    #[cfg(feature = "postgres")]
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub(crate) database_url: Option<String>,
    /// Do not migrate the database at start: for a role without DDL rights, after
    /// `standalone migrate` ran with the owner's.
    #[cfg(feature = "postgres")]
    #[arg(long, global = true)]
    pub(crate) no_migrate: bool,
    /// TOML file mapping the host's own orders and organizations tables ([orders],
    /// [organizations]: a table and, per contract field, a column or SQL expression): the
    /// server and every subcommand read the host's data through it, none copied. Checked at
    /// start; `migrate` (and a server that migrates) adds the crate's triggers to those
    /// tables; `indexes` prints the indexes it needs. See the hosting docs.
    #[cfg(feature = "postgres")]
    #[arg(long, value_name = "FILE", global = true, requires = "database_url")]
    pub(crate) schema_map: Option<PathBuf>,
    /// PEM certificate chain: serve HTTPS (HTTP/1.1 and HTTP/2 by ALPN). Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Limit each API key to N requests per second (burst N); off by default.
    #[arg(long, value_name = "N")]
    pub(crate) rate_limit: Option<NonZeroU32>,
    /// Keep the --rate-limit and --auth-failure-limit budgets in the Redis at this URL, shared
    /// by every replica
    /// (default: in this process).
    #[cfg(feature = "redis")]
    #[arg(long, value_name = "URL", env = "REDIS_URL", hide_env_values = true)]
    pub(crate) redis_url: Option<String>,
    /// The start of the names of this deployment's budgets in Redis, so that deployments
    /// sharing a Redis never share a budget.
    #[cfg(feature = "redis")]
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "partner_api:",
        requires = "redis_url"
    )]
    pub(crate) redis_prefix: String,
    /// With --database-url: read every key and page of orders from the database, without the
    /// caches (by default they answer from memory, told of changes by PostgreSQL's NOTIFY).
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// Seconds a cached key or page answers before the database is asked again: the bound on
    /// a change that no trigger reported (a restore with --disable-triggers, writes under
    /// session_replication_role = replica). Reported changes reach the caches within 1 s.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub(crate) cache_max_age: u64,
    /// Seconds one request may take before it is answered with a JSON 503.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) request_timeout: u64,
    /// Seconds a connection may stay open with no request in flight, from accept and
    /// between keep-alive requests (HTTP/2 pings and other bytes that carry no request do
    /// not count).
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) idle_timeout: u64,
    /// Most connections served at once; at the cap, new ones wait in the listen backlog
    /// until one closes. The open-file limit is raised to fit at start (each connection is a
    /// file descriptor); where the hard limit is lower, the cap is lowered to fit, with a
    /// warning.
    #[arg(long, value_name = "N", default_value_t = crate::serve::DEFAULT_MAX_CONNECTIONS)]
    pub(crate) max_connections: usize,
    /// Most connections one client (an IPv4 address, an IPv6 /64) may hold at once (0: no cap); more from it are
    /// closed at once. Behind a load balancer every client has its address: raise it or
    /// turn it off (0) there, and cap at the balancer instead.
    #[arg(long, value_name = "N", default_value_t = crate::serve::DEFAULT_MAX_CONNECTIONS_PER_IP)]
    pub(crate) max_connections_per_ip: usize,
    /// Seconds a connection may live; then it is closed gracefully, after its requests in
    /// flight (HTTP/2 with a GOAWAY), and the client reconnects.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub(crate) max_connection_age: u64,
    /// Failed authentications a client address may make per second, with bursts of ten
    /// times as many; past that, 429 without asking the database. In Redis with
    /// --redis-url, shared by every replica. 0 turns the throttle off.
    #[arg(long, value_name = "N", default_value_t = partner_api::service::DEFAULT_AUTH_FAILURE_LIMIT)]
    pub(crate) auth_failure_limit: u32,
    /// A proxy (CIDR, repeatable) whose forwarding header (--client-address-header) names
    /// the client; from anyone else it is ignored.
    #[arg(long = "trusted-proxy", value_name = "CIDR", value_parser = parse_cidr)]
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header that names the client behind a --trusted-proxy: the one your proxies
    /// write (x-forwarded-for or forwarded); the other is ignored, so a client cannot pass its
    /// own through.
    #[arg(long, value_name = "HEADER", default_value = "x-forwarded-for")]
    pub(crate) client_address_header: partner_api::ClientAddressHeader,
    /// Serve GitHub's secret scanning endpoint at POST /secret-scanning/github on the API's
    /// listener, verifying reports with the public keys of this file or URL (GitHub's is
    /// https://api.github.com/meta/public_keys/secret_scanning); leaked keys are revoked.
    #[arg(long, value_name = "FILE or URL")]
    pub(crate) secret_scanning_keys: Option<String>,
    /// Serve the API's metrics for Prometheus at http://ADDR/metrics, on this listener of
    /// their own (never on the API's port); port 0 picks a free port. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
    /// Organizations that get a series of their own in the per-organization metrics; later
    /// ones count as organization_id="_other".
    #[arg(long, value_name = "N", default_value_t = partner_api::metrics::DEFAULT_MAX_ORGANIZATIONS)]
    pub(crate) metrics_organizations: usize,
    /// Label the per-organization requests metric with the key id for the first N keys (the
    /// rest as key_id="_other"); off (0) by default.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) metrics_key_ids: usize,
    /// With --database-url, this replica does not deliver webhooks (the others still do).
    #[cfg(feature = "webhooks")]
    #[arg(long)]
    pub(crate) no_webhooks: bool,
    /// Seconds to wait before each retry of a failed webhook delivery, the first counted
    /// from the first attempt and each from the one before (comma-separated; empty: no
    /// retries); each with +-20 % jitter.
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "SECONDS,...", value_parser = parse_schedule,
          default_value = "5,300,1800,7200,18000,36000,36000")]
    pub(crate) webhook_retry_schedule: RetrySchedule,
    /// Seconds one webhook delivery attempt may take (connect, send, answer).
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) webhook_timeout: u64,
    /// Seconds an attempt to an endpoint whose last attempt timed out may take (at most
    /// --webhook-timeout; every fourth such attempt gets the full time-out): how long one
    /// that hangs holds a slot once it is known to hang.
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "SECONDS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) webhook_failing_timeout: u64,
    /// Deliveries this replica has in flight at most, and at most 4 to one endpoint.
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) webhook_concurrency: u64,
    /// Deliveries of one organization in flight at most (default: half the concurrency); the
    /// share shrinks as more organizations have deliveries in flight.
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) webhook_per_organization: Option<u64>,
    /// Deliveries to endpoints whose deliveries fail in flight at most, all organizations
    /// together (default: half the concurrency).
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) webhook_failing_share: Option<u64>,
    /// Seconds every delivery to an endpoint must have failed before it is disabled.
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "SECONDS", default_value_t = 5 * 24 * 3600)]
    pub(crate) webhook_disable_after: u64,
    /// Let webhook deliveries reach this range (CIDR, repeatable) although it is blocked by
    /// default (loopback, private, link-local, ...).
    #[cfg(feature = "webhooks")]
    #[arg(long = "webhook-allow-subnet", value_name = "CIDR", value_parser = parse_cidr)]
    pub(crate) webhook_allow_subnets: Vec<ipnet::IpNet>,
    /// Deliver webhooks to plain http URLs too (by default https only).
    #[cfg(feature = "webhooks")]
    #[arg(long)]
    pub(crate) webhook_allow_http: bool,
    /// Days webhook messages are kept, with their deliveries and attempts (0: for ever); a
    /// delivering replica deletes older ones every minute, in small batches.
    #[cfg(feature = "webhooks")]
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    pub(crate) webhook_retention_days: u64,
    /// Seconds between two writes of the keys' usage counts (one statement per replica);
    /// the counts in hand are written on shutdown too.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1800))]
    pub(crate) usage_flush_interval: u64,
    /// Days the keys' usage is kept (0: for ever); each replica deletes older hours every
    /// minute, in small batches.
    #[arg(long, value_name = "DAYS", default_value_t = 90)]
    pub(crate) usage_retention_days: u64,
    /// Days the audit log's entries are kept on PostgreSQL (0: for ever); each replica
    /// deletes older ones every hour, in small batches, and each pruned organization gets an
    /// audit.pruned entry. A role other than the owner's keeps at least 400 days.
    #[arg(long, value_name = "DAYS", default_value_t = 400)]
    pub(crate) audit_retention_days: u64,
    /// Days the events feed (GET /v1/events) keeps events (0: for ever); older ones are
    /// deleted in small batches, at most once a minute. An `after` older than that answers
    /// 410 Gone.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    pub(crate) events_retention_days: u64,
    /// Declares a route (/me, /orders, /events), a query parameter of one (/orders?provider)
    /// or an API version (2026-11-27) deprecated from DATE (YYYY-MM-DD, UTC midnight),
    /// optionally with a sunset date, a link to what explains it, and `enforce` (410 Gone from
    /// the sunset on). Repeatable. Answers it concerns (for a version: every answer served at
    /// it) carry Deprecation, Sunset and Link; the served OpenAPI document marks a route or
    /// parameter, GET /v1/versions a version.
    #[arg(
        long = "deprecate",
        value_name = "(ROUTE[?PARAM]|VERSION)=DATE[,sunset=DATE][,link=URL][,enforce]",
        value_parser = parse_deprecation
    )]
    pub(crate) deprecations: Vec<partner_api::deprecation::Deprecation>,
}

fn parse_deprecation(text: &str) -> Result<partner_api::deprecation::Deprecation, String> {
    let deprecation: partner_api::deprecation::Deprecation =
        text.parse().map_err(|err| format!("{err}"))?;
    let versions = partner_api::versions::Versions::shipped();
    match deprecation.version() {
        Some(version) if !versions.offers(version) => Err(format!(
            "{version} is not a version of the API, one of {}",
            versions
                .offered()
                .map(|version| version.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(deprecation),
    }
}

fn parse_cidr(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is not an address range such as 10.0.0.0/8"))
}

/// The waits before a failed webhook delivery's retries, in seconds.
#[cfg(feature = "webhooks")]
#[derive(Clone, Debug)]
pub(crate) struct RetrySchedule(pub(crate) Vec<u64>);

/// `5,300,1800`: seconds, comma-separated, each from 1 s to 30 days; empty for no retries.
#[cfg(feature = "webhooks")]
fn parse_schedule(text: &str) -> Result<RetrySchedule, String> {
    if text.trim().is_empty() {
        return Ok(RetrySchedule(Vec::new()));
    }
    text.split(',')
        .map(|wait| match wait.trim().parse::<u64>() {
            Ok(seconds @ 1..=2_592_000) => Ok(seconds),
            _ => Err(format!(
                "{wait:?} is not a number of seconds from 1 to 2592000 (30 days)"
            )),
        })
        .collect::<Result<_, _>>()
        .map(RetrySchedule)
}

/// How the host wraps the API.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) rate_limit: Option<NonZeroU32>,
    /// Failed authentications per second per client address (`None`: not throttled).
    pub(crate) auth_failure_limit: Option<NonZeroU32>,
    /// Where rate-limit budgets live: Redis at this URL, or this process.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) redis_url: Option<String>,
    /// The start of this deployment's budget names in Redis.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) redis_prefix: String,
    /// Proxies whose forwarding header is believed.
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,
    /// The forwarding header they write.
    pub(crate) client_address_header: partner_api::ClientAddressHeader,
    pub(crate) request_timeout: Duration,
    /// Organizations with a metrics series of their own.
    pub(crate) metrics_organizations: usize,
    /// Keys with a metrics series of their own (0: no key-id label).
    pub(crate) metrics_key_ids: usize,
    /// Time between two writes of the usage counts.
    pub(crate) usage_flush_interval: Duration,
    /// How long usage is kept (`None`: for ever).
    pub(crate) usage_retention: Option<Duration>,
    /// How long the events feed keeps events (`None`: for ever).
    pub(crate) events_retention: Option<Duration>,
    /// What the host declared deprecated.
    pub(crate) deprecations: Vec<partner_api::deprecation::Deprecation>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            rate_limit: None,
            auth_failure_limit: NonZeroU32::new(partner_api::service::DEFAULT_AUTH_FAILURE_LIMIT),
            redis_url: None,
            redis_prefix: "partner_api:".to_owned(),
            trusted_proxies: Vec::new(),
            client_address_header: partner_api::ClientAddressHeader::default(),
            request_timeout: Duration::from_secs(30),
            metrics_organizations: partner_api::metrics::DEFAULT_MAX_ORGANIZATIONS,
            metrics_key_ids: 0,
            usage_flush_interval: partner_api::usage::DEFAULT_FLUSH_INTERVAL,
            usage_retention: Some(partner_api::store::DEFAULT_USAGE_RETENTION),
            events_retention: Some(partner_api::store::DEFAULT_EVENTS_RETENTION),
            deprecations: Vec::new(),
        }
    }
}

impl Options {
    pub(crate) fn from_args(args: &Args) -> Self {
        #[cfg(feature = "redis")]
        let redis_url = args.redis_url.clone();
        #[cfg(not(feature = "redis"))]
        let redis_url = None;
        #[cfg(feature = "redis")]
        let redis_prefix = args.redis_prefix.clone();
        #[cfg(not(feature = "redis"))]
        let redis_prefix = String::new();
        Self {
            rate_limit: args.rate_limit,
            auth_failure_limit: NonZeroU32::new(args.auth_failure_limit),
            redis_url,
            redis_prefix,
            trusted_proxies: args.trusted_proxies.clone(),
            client_address_header: args.client_address_header,
            request_timeout: Duration::from_secs(args.request_timeout),
            metrics_organizations: args.metrics_organizations,
            metrics_key_ids: args.metrics_key_ids,
            usage_flush_interval: Duration::from_secs(args.usage_flush_interval),
            usage_retention: (args.usage_retention_days > 0)
                .then(|| Duration::from_secs(args.usage_retention_days.saturating_mul(24 * 3600))),
            events_retention: (args.events_retention_days > 0)
                .then(|| Duration::from_secs(args.events_retention_days.saturating_mul(24 * 3600))),
            deprecations: args.deprecations.clone(),
        }
    }
}
