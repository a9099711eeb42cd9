//! Which stores the API reads: PostgreSQL, a seed file in memory, or the demo data.

use partner_api::last_used::LastUsedRecorder;
use partner_api::seed::Seed;
use partner_api::store::KeyManager;
use partner_api::{KeyStore, LocalRateLimiter, MemoryStore, OrderStore, PartnerApi};

use crate::cli::{Args, Options};

/// The partner API over `store`, configured by `options`.
pub(crate) fn api<S: KeyStore + OrderStore + 'static>(store: S, options: &Options) -> PartnerApi {
    let api = PartnerApi::from_store(store);
    match options.rate_limit {
        Some(limit) => api.with_rate_limiter(LocalRateLimiter::per_second(limit)),
        None => api,
    }
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
        return Ok(recorded_api(store, options));
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
#[cfg(feature = "postgres")]
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
