//! GitHub's secret scanning endpoint of the demo host (`--secret-scanning-keys`).

use partner_api::MemoryStore;

/// GitHub's secret scanning endpoint over `store`, its public keys from the file at `path`.
#[cfg(feature = "secret-scanning")]
pub(crate) fn secret_scanning_endpoint(
    path: &std::path::Path,
    store: MemoryStore,
) -> Result<partner_api::secret_scanning::SecretScanningService, Box<dyn std::error::Error>> {
    use partner_api::secret_scanning::{GithubPublicKeys, SecretScanningService};
    let public_keys = GithubPublicKeys::from_document(&std::fs::read(path)?)?;
    Ok(SecretScanningService::new(store, public_keys).with_leak_hook(|leaked| {
        tracing::warn!(key_id = %leaked.record.id, organization_id = %leaked.record.organization_id, "a leaked API key was revoked");
    }))
}

#[cfg(not(feature = "secret-scanning"))]
pub(crate) fn secret_scanning_endpoint(
    _path: &std::path::Path,
    _store: MemoryStore,
) -> Result<axum::routing::MethodRouter, Box<dyn std::error::Error>> {
    Err("--secret-scanning-keys needs the feature secret-scanning".into())
}
