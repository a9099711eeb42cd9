//! Which stores the API reads: PostgreSQL, a seed file in memory, or the demo data.

#[cfg(feature = "postgres")]
use partner_api::cache::{CachingKeyStore, CachingOrderStore};
use partner_api::last_used::LastUsedRecorder;
use partner_api::management::KeyManager;
use partner_api::seed::Seed;
use partner_api::{KeyStore, LocalRateLimiter, MemoryStore, OrderStore, PartnerApi};

use crate::cli::{Args, Options};

/// The partner API over `store`, configured by `options`.
pub(crate) fn api<S: KeyStore + OrderStore + 'static>(store: S, options: &Options) -> PartnerApi {
    configured(PartnerApi::from_store(store), options)
}

/// `api` with the metrics labels and rate limits `options` ask for: limits in Redis when
/// given its URL, else in this process. (A Redis URL that is not one is a start-up error,
/// caught by `check_redis_url`.)
fn configured(api: PartnerApi, options: &Options) -> PartnerApi {
    let api = api
        .with_organization_labels(options.metrics_organizations)
        .with_key_id_labels(options.metrics_key_ids);
    let Some(limit) = options.rate_limit else {
        return api;
    };
    #[cfg(feature = "redis")]
    if let Some(url) = &options.redis_url {
        if let Ok(limiter) =
            partner_api::rate_limit::redis::RedisRateLimiter::per_second(url, limit)
        {
            return api.with_rate_limiter(limiter);
        }
    }
    api.with_rate_limiter(LocalRateLimiter::per_second(limit))
}

/// Refuses a `--redis-url` that is no Redis URL before anything is served.
pub(crate) fn check_redis_url(options: &Options) -> Result<(), String> {
    #[cfg(feature = "redis")]
    if let (Some(url), Some(limit)) = (&options.redis_url, options.rate_limit) {
        partner_api::rate_limit::redis::RedisRateLimiter::per_second(url, limit)
            .map_err(|err| format!("bad --redis-url: {err}"))?;
    }
    let _ = options;
    Ok(())
}

/// The partner API over `store`, configured by `options`, recording the last use of keys in
/// `store` (the recorder is returned, to write the batch in hand at shutdown).
fn recorded_api<S>(store: S, options: &Options) -> (PartnerApi, LastUsedRecorder)
where
    S: KeyStore + OrderStore + KeyManager + Clone + 'static,
{
    let recorder = LastUsedRecorder::spawn(store.clone());
    let api = api(store, options).with_last_used(recorder.clone());
    (api, recorder)
}

/// The API over what `args` name: PostgreSQL (migrated, and seeded if a seed file is given),
/// a seed file in memory, or the demo data in memory; and its last-use recorder.
pub(crate) async fn api_for(
    args: &Args,
    options: &Options,
) -> Result<(PartnerApi, LastUsedRecorder), String> {
    #[cfg(feature = "postgres")]
    if let Some(url) = &args.database_url {
        let store = partner_api::PgStore::connect_lazy(url).map_err(|err| error_chain(&err))?;
        store
            .migrate()
            .await
            .map_err(|err| format!("cannot migrate the database: {}", error_chain(&err)))?;
        if let Some(path) = &args.seed {
            let seed = Seed::from_path(path).map_err(|err| err.to_string())?;
            store
                .load_seed(&seed)
                .await
                .map_err(|err| err.to_string())?;
        }
        if args.no_cache {
            return Ok(recorded_api(store, options));
        }
        // Keys and pages answered from memory; every change, however made, reaches the caches
        // through the database's notifications.
        let notifications = partner_api::cache::postgres::listen(store.pool().clone());
        let keys = CachingKeyStore::new(store.clone()).with_notifications(&notifications);
        let orders = CachingOrderStore::new(store.clone()).with_notifications(&notifications);
        let recorder = LastUsedRecorder::spawn(store);
        let api =
            configured(PartnerApi::new(keys, orders), options).with_last_used(recorder.clone());
        return Ok((api, recorder));
    }
    let seed = match &args.seed {
        Some(path) => Seed::from_path(path),
        None => Ok(Seed::demo()),
    };
    let store: MemoryStore = seed
        .and_then(|seed| seed.to_memory_store())
        .map_err(|err| err.to_string())?;
    Ok(recorded_api(store, options))
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
