//! Which stores the API reads: PostgreSQL, a seed file in memory, or the demo data.

#[cfg(feature = "postgres")]
use partner_api::cache::{CachingKeyStore, CachingOrderStore};
use partner_api::deprecated_calls::DeprecatedCallRecorder;
use partner_api::last_used::LastUsedRecorder;
use partner_api::maintenance::Maintenance;
use partner_api::seed::Seed;
use partner_api::store::{DeprecatedCallStore, UsageStore};
use partner_api::store::{EventFeed, KeyManager};
use partner_api::usage::UsageRecorder;
use partner_api::{KeyStore, LocalRateLimiter, MemoryStore, OrderStore, PartnerApi, RateLimiter};

use std::num::NonZeroU32;
use std::sync::Arc;

use crate::cli::{Args, Options};

/// The partner API over `store`, configured by `options`.
pub(crate) fn api<S: KeyStore + OrderStore + 'static>(store: S, options: &Options) -> PartnerApi {
    configured(PartnerApi::from_store(store), options)
}

/// `api` with the metrics labels, deprecations, rate limits and throttle of failed
/// authentication `options` ask for: budgets in Redis when given its URL, else in this process. (A Redis URL that is
/// not one is a start-up error, caught by `check_redis_url`.)
fn configured(api: PartnerApi, options: &Options) -> PartnerApi {
    let mut api = api
        .with_organization_labels(options.metrics_organizations)
        .with_key_id_labels(options.metrics_key_ids)
        .with_client_address_header(options.client_address_header)
        .with_trusted_proxies(options.trusted_proxies.iter().copied());
    for deprecation in &options.deprecations {
        api = api.with_deprecation(deprecation.clone());
    }
    api = match options.auth_failure_limit {
        None => api.without_auth_failure_limiter(),
        Some(limit) => {
            let burst = limit.saturating_mul(NonZeroU32::MIN.saturating_add(9));
            api.with_auth_failure_limiter(limiter(options, "auth_failures:", limit, burst))
        }
    };
    match options.rate_limit {
        Some(limit) => api.with_rate_limiter(limiter(options, "rate:", limit, limit)),
        None => api,
    }
}

/// A limiter of `per_second` with bursts of `burst`: in the Redis of `options`, its budgets
/// named `{--redis-prefix}{kind}...`, or else in this process.
fn limiter(
    options: &Options,
    kind: &str,
    per_second: NonZeroU32,
    burst: NonZeroU32,
) -> Arc<dyn RateLimiter> {
    let period = std::time::Duration::from_secs(1) / per_second.get();
    #[cfg(feature = "redis")]
    if let Some(url) = &options.redis_url {
        if let Ok(shared) =
            partner_api::rate_limit::redis::RedisRateLimiter::new(url, period, burst)
        {
            return Arc::new(shared.with_key_prefix(format!("{}{kind}", options.redis_prefix)));
        }
    }
    let _ = (options, kind);
    Arc::new(LocalRateLimiter::new(period, burst))
}

/// Refuses a `--redis-url` that is no Redis URL before anything is served.
pub(crate) fn check_redis_url(options: &Options) -> Result<(), String> {
    #[cfg(feature = "redis")]
    if let Some(url) = &options.redis_url {
        let one = NonZeroU32::MIN;
        partner_api::rate_limit::redis::RedisRateLimiter::per_second(url, one)
            .map_err(|err| without_password(&format!("bad --redis-url: {err}"), url))?;
    }
    let _ = options;
    Ok(())
}

/// `api` serving the events feed of `feed`, and `maintenance` with its retention as
/// `options` say (none: for ever).
fn with_feed<F: EventFeed + Clone + 'static>(
    api: PartnerApi,
    maintenance: Maintenance,
    feed: F,
    options: &Options,
) -> (PartnerApi, Maintenance) {
    let maintenance = match options.events_retention {
        Some(keep) => maintenance.with_events_retention(feed.clone(), keep),
        None => maintenance,
    };
    (api.with_events(feed), maintenance)
}

/// `api` recording the last use of keys, each key's usage and, when `options` declare
/// deprecations, its deprecated calls in `store`; `maintenance` driving the recorders and
/// writing what they hold at shutdown.
fn with_recorders<S>(
    api: PartnerApi,
    maintenance: Maintenance,
    store: &S,
    options: &Options,
) -> (PartnerApi, Maintenance)
where
    S: KeyManager + UsageStore + DeprecatedCallStore + Clone + 'static,
{
    let last_used = LastUsedRecorder::new(store.clone());
    let usage = UsageRecorder::new(store.clone())
        .with_flush_interval(options.usage_flush_interval)
        .with_retention(options.usage_retention);
    let mut api = api
        .with_last_used(last_used.clone())
        .with_usage(usage.clone());
    // The deprecated calls are written first at shutdown, then usage, then last uses.
    let mut maintenance = maintenance;
    if !options.deprecations.is_empty() {
        let deprecated_calls = DeprecatedCallRecorder::new(store.clone())
            .with_flush_interval(options.usage_flush_interval);
        api = api
            .with_deprecated_calls(deprecated_calls.clone())
            .with_calls_per_version(true);
        maintenance = maintenance.with_deprecated_calls(deprecated_calls);
    }
    (api, maintenance.with_usage(usage).with_last_used(last_used))
}

/// The partner API over `store`, configured by `options`, with its recorders and events
/// feed, and `maintenance` with what drives them.
fn recorded_api<S>(store: S, options: &Options, maintenance: Maintenance) -> Served
where
    S: KeyStore
        + OrderStore
        + KeyManager
        + UsageStore
        + DeprecatedCallStore
        + EventFeed
        + Clone
        + 'static,
{
    let (api, maintenance) =
        with_recorders(api(store.clone(), options), maintenance, &store, options);
    let (api, maintenance) = with_feed(api, maintenance, store.clone(), options);
    Served {
        api,
        maintenance,
        keys: Arc::new(store),
        #[cfg(feature = "postgres")]
        database: None,
    }
}

/// What the host serves: the API, its last-use recorder, and the key manager of its store
/// (for the secret scanning endpoint).
pub(crate) struct Served {
    pub(crate) api: PartnerApi,
    /// Everything in the background (the recorders, retention of events, audit and webhook
    /// messages), started once the host serves and shut down,
    /// recorders flushed, when it stops.
    pub(crate) maintenance: Maintenance,
    pub(crate) keys: Arc<dyn KeyManager>,
    /// The database, when serving from one (its outbox is what this replica delivers).
    #[cfg(feature = "postgres")]
    pub(crate) database: Option<partner_api::PgStore>,
}

/// The API over what `args` name: PostgreSQL (migrated, and seeded if a seed file is given),
/// a seed file in memory, or the demo data in memory; and its last-use recorder.
pub(crate) async fn api_for(args: &Args, options: &Options) -> Result<Served, String> {
    #[cfg(feature = "postgres")]
    if let Some(url) = &args.database_url {
        let store = database(args, url).await?;
        warn_of_missing_indexes(&store).await;
        let mut maintenance = Maintenance::new();
        if args.audit_retention_days > 0 {
            let keep =
                std::time::Duration::from_secs(args.audit_retention_days.saturating_mul(24 * 3600));
            maintenance = maintenance.with_audit_retention(store.clone(), keep);
        }
        #[cfg(feature = "webhooks")]
        if let Some(keep) = crate::webhooks::retention(args) {
            maintenance = maintenance.with_webhook_retention(store.clone(), keep);
        }
        if let Some(path) = &args.seed {
            let seed = Seed::from_path(path).map_err(|err| err.to_string())?;
            store
                .load_seed(&seed)
                .await
                .map_err(|err| err.to_string())?;
        }
        // In the capture mode, one replica at a time reads the slot (this one when it holds
        // the lease); in the default mode the reader only looks, once a second.
        tokio::spawn(store.order_capture().run());
        // Every change, however made, reaches the caches and the known keys through the
        // database's notifications.
        let notifications = partner_api::cache::postgres::listen(store.pool().clone());
        if args.no_cache {
            let mut served = recorded_api(store.clone(), options, maintenance);
            served.api = known_keys(served.api, &store, &notifications, options);
            served.database = Some(store);
            return Ok(served);
        }
        // Keys and pages answered from memory.
        let max_age = std::time::Duration::from_secs(args.cache_max_age.max(1));
        let keys = CachingKeyStore::new(store.clone())
            .with_max_age(max_age)
            .with_notifications(&notifications);
        let orders = CachingOrderStore::new(store.clone())
            .with_max_age(max_age)
            .with_notifications(&notifications);
        let api = configured(PartnerApi::new(keys, orders), options);
        let (api, maintenance) = with_recorders(api, maintenance, &store, options);
        // The feed is read from the database each time: no cache may hide a committed event.
        let (api, maintenance) = with_feed(api, maintenance, store.clone(), options);
        let api = known_keys(api, &store, &notifications, options);
        return Ok(Served {
            api,
            maintenance,
            keys: Arc::new(store.clone()),
            database: Some(store),
        });
    }
    let seed = match &args.seed {
        Some(path) => Seed::from_path(path),
        None => Ok(Seed::demo()),
    };
    let store: MemoryStore = seed
        .and_then(|seed| seed.to_memory_store())
        .map_err(|err| err.to_string())?;
    Ok(recorded_api(store, options, Maintenance::new()))
}

/// `api` with the keys of `store` known to its failure throttle (when it throttles), so a
/// valid key is never refused for its neighbours' failures.
#[cfg(feature = "postgres")]
fn known_keys(
    api: PartnerApi,
    store: &partner_api::PgStore,
    notifications: &partner_api::cache::Notifications,
    options: &Options,
) -> PartnerApi {
    if options.auth_failure_limit.is_none() {
        return api;
    }
    api.with_known_keys(partner_api::cache::KnownKeys::following(
        store.clone(),
        notifications,
    ))
}

/// The database a database command (`keys`, `webhooks`, `audit`) works on, and how its
/// store errors read (never with the URL's password); or why there is none.
#[cfg(feature = "postgres")]
pub(crate) async fn command_database<'a>(
    args: &'a Args,
    command: &str,
) -> Result<
    (
        partner_api::PgStore,
        impl Fn(partner_api::StoreError) -> String + Copy + 'a,
    ),
    String,
> {
    let Some(url) = &args.database_url else {
        return Err(format!(
            "the {command} command needs a database: give --database-url or set DATABASE_URL"
        ));
    };
    let store = database(args, url).await?;
    Ok((store, move |err: partner_api::StoreError| {
        without_password(&error_chain(&err), url)
    }))
}

/// Why a database command cannot run in a build without PostgreSQL.
#[cfg(not(feature = "postgres"))]
pub(crate) fn no_database_support(command: &str) -> String {
    format!(
        "the {command} command works on a database: this build has no PostgreSQL support \
         (build with --features postgres, then give --database-url or DATABASE_URL)"
    )
}

/// The database at `url` (`args`' --database-url), migrated unless --no-migrate, read
/// through --schema-map when given (its triggers made when migrating: the owner's work).
/// Errors never show the URL's password.
#[cfg(feature = "postgres")]
pub(crate) async fn database(args: &Args, url: &str) -> Result<partner_api::PgStore, String> {
    let fail = |what: &str, err: &partner_api::StoreError| {
        without_password(&format!("{what}: {}", error_chain(err)), url)
    };
    // The file first: a map that does not parse is said before any wait for the database.
    let map = args
        .schema_map
        .as_deref()
        .map(read_schema_map)
        .transpose()?;
    let mut store = partner_api::PgStore::connect_lazy(url)
        .map_err(|err| without_password(&error_chain(&err), url))?;
    if !args.no_migrate {
        store
            .migrate()
            .await
            .map_err(|err| fail("cannot migrate the database", &err))?;
    }
    if let (Some(path), Some(map)) = (&args.schema_map, map) {
        store = store
            .with_schema_map(map)
            .await
            .map_err(|err| fail(&format!("--schema-map {}", path.display()), &err))?;
        if !args.no_migrate {
            store
                .register_schema_map()
                .await
                .map_err(|err| fail("cannot add the triggers of --schema-map", &err))?;
        }
    }
    Ok(store)
}

/// The schema map of the TOML file at `path`.
#[cfg(feature = "postgres")]
fn read_schema_map(path: &std::path::Path) -> Result<partner_api::SchemaMap, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("--schema-map {}: {err}", path.display()))?;
    toml::from_str(&text).map_err(|err| format!("--schema-map {}: {err}", path.display()))
}

/// One warning at start for each index the schema map needs and the database lacks.
#[cfg(feature = "postgres")]
async fn warn_of_missing_indexes(store: &partner_api::PgStore) {
    match store.missing_schema_indexes().await {
        Ok(missing) => {
            for index in missing {
                tracing::warn!(
                    serves = index.serves(),
                    create = %index.statement(),
                    "an index the schema map needs is missing: reads it serves scan the table"
                );
            }
        }
        Err(err) => tracing::warn!(
            error = %error_chain(&err),
            "cannot check the indexes the schema map needs"
        ),
    }
}

/// The `order-capture` command: switches the mode or prints it.
#[cfg(feature = "postgres")]
pub(crate) async fn order_capture(
    args: &Args,
    action: &crate::commands::OrderCaptureAction,
) -> Result<Vec<String>, String> {
    use crate::commands::OrderCaptureAction;
    let (store, error) = command_database(args, "order-capture").await?;
    match action {
        OrderCaptureAction::Start => store.start_order_capture().await.map_err(error)?,
        OrderCaptureAction::Stop { drain_seconds } => store
            .stop_order_capture(std::time::Duration::from_secs(*drain_seconds))
            .await
            .map_err(error)?,
        OrderCaptureAction::Status => {}
        OrderCaptureAction::Run { batch } => {
            store.order_capture().with_batch(*batch).run().await;
        }
    }
    let mode = store.order_capture().mode().await.map_err(error)?;
    Ok(vec![match mode {
        Some(slot) => format!("capture {slot}"),
        None => "triggers".to_owned(),
    }])
}

/// `standalone indexes`: the statements of the indexes the schema map needs, or with
/// `providers` the index of that list (with `missing`, those the database lacks), one a line.
#[cfg(feature = "postgres")]
pub(crate) async fn indexes(
    args: &Args,
    missing: bool,
    providers: &[String],
) -> Result<Vec<String>, String> {
    if args.schema_map.is_none() && providers.is_empty() {
        return Err(
            "indexes needs --schema-map (the crate's own tables have theirs) or --provider".into(),
        );
    }
    let (store, error) = command_database(args, "indexes").await?;
    let mut indexes = if providers.is_empty() {
        store.schema_indexes()
    } else {
        vec![store.provider_index(providers).map_err(error)?]
    };
    if missing {
        indexes = store.missing_indexes(&indexes).await.map_err(error)?;
    }
    Ok(indexes.iter().map(|index| index.statement()).collect())
}

#[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
/// `message` with the password of `url` (as written, and percent-decoded) masked: for any
/// message that could quote the URL.
pub(crate) fn without_password(message: &str, url: &str) -> String {
    let Some(password) = password_of(url) else {
        return message.to_owned();
    };
    let decoded = percent_decoded(password);
    let mut masked = message.replace(password, "***");
    if !decoded.is_empty() {
        masked = masked.replace(&decoded, "***");
    }
    masked
}

#[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
/// The password of `scheme://user:password@host...`, if there is one.
fn password_of(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

#[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes
            .get(index + 1..index + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[index], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                index += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// An error and its sources, on one line.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        text.push_str(&format!(": {err}"));
        source = err.source();
    }
    text
}

/// Says so when `DATABASE_URL` is set in a build that cannot use it.
pub(crate) fn warn_of_unused_database_url() {
    if !cfg!(feature = "postgres") && std::env::var_os("DATABASE_URL").is_some() {
        eprintln!(
            "warning: DATABASE_URL is set, but this build has no PostgreSQL support \
             (--features postgres); serving from memory"
        );
    }
}

/// Whether the host serves the built-in demo data.
pub(crate) fn serves_demo_data(args: &Args) -> bool {
    #[cfg(feature = "postgres")]
    if args.database_url.is_some() {
        return false;
    }
    args.seed.is_none()
}
