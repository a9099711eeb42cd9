//! [`GithubPublicKeys`]: the keys GitHub signs its reports with, from a fixed document or a
//! fetcher, cached, refreshed when an unknown key identifier arrives.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use p256::ecdsa::VerifyingKey;
use p256::pkcs8::DecodePublicKey;
use serde::Deserialize;

use crate::log::ErrorChain;

/// Where GitHub publishes its secret scanning public keys.
pub const GITHUB_PUBLIC_KEYS_URL: &str = "https://api.github.com/meta/public_keys/secret_scanning";

/// The shortest time between two fetches of the key document, by default: an unknown key
/// identifier (a rotation, or a forger's made-up one) fetches at most this often.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// The longest a fetch of the key document may take; a fetch that takes longer fails (and
/// reports wait for it meanwhile, so it must not hang).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches GitHub's list of secret scanning public keys (the JSON document at
/// [`GITHUB_PUBLIC_KEYS_URL`]) with the host's own HTTP client: the crate brings none.
#[async_trait]
pub trait PublicKeyFetcher: Send + Sync {
    /// The document's bytes.
    async fn fetch(&self) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>>;
}

/// Why a key document was refused.
#[derive(Debug)]
pub struct PublicKeysError(String);

impl fmt::Display for PublicKeysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GitHub's secret scanning key document: {}", self.0)
    }
}

impl std::error::Error for PublicKeysError {}

/// The public keys that GitHub's secret scanning reports are signed with.
///
/// From a fixed document ([`from_document`](Self::from_document)), or fetched when first
/// needed ([`from_fetcher`](Self::from_fetcher)) and again when a report names a key
/// identifier the cache does not hold, at most once per
/// [`refresh interval`](Self::with_refresh_interval). Every key the document lists is
/// accepted (current or not), so reports keep verifying while GitHub rotates its keys.
/// Clones share the cache.
#[derive(Clone)]
pub struct GithubPublicKeys {
    inner: Arc<Inner>,
    refresh_interval: Duration,
}

struct Inner {
    keys: RwLock<Arc<HashMap<String, VerifyingKey>>>,
    fetcher: Option<Box<dyn PublicKeyFetcher>>,
    /// When the document was last fetched, held while fetching so that one task fetches
    /// and the others wait for its answer.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
}

/// `{"public_keys": [{"key_identifier", "key", "is_current"}]}`; other members are ignored.
#[derive(Deserialize)]
struct Document {
    public_keys: Vec<ListedKey>,
}

#[derive(Deserialize)]
struct ListedKey {
    key_identifier: String,
    key: String,
}

impl GithubPublicKeys {
    /// The keys of the document `json` (a file the host keeps, say), never refreshed.
    ///
    /// # Errors
    ///
    /// A document that is not the JSON above, or that lists no key this crate can read (a
    /// P-256 public key in PEM, as SubjectPublicKeyInfo).
    pub fn from_document(json: &[u8]) -> Result<Self, PublicKeysError> {
        let keys = parse(json)?;
        Ok(Self::with(keys, None))
    }

    /// Keys that `fetcher` fetches when first needed, and again for an unknown identifier.
    pub fn from_fetcher(fetcher: impl PublicKeyFetcher + 'static) -> Self {
        Self::with(HashMap::new(), Some(Box::new(fetcher)))
    }

    fn with(
        keys: HashMap<String, VerifyingKey>,
        fetcher: Option<Box<dyn PublicKeyFetcher>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                keys: RwLock::new(Arc::new(keys)),
                fetcher,
                last_fetch: tokio::sync::Mutex::new(None),
            }),
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
        }
    }

    /// Fetches at most once per `interval` ([`DEFAULT_REFRESH_INTERVAL`] by default).
    #[must_use]
    pub fn with_refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// Returns the identifiers of the keys held now.
    pub fn identifiers(&self) -> Vec<String> {
        let mut identifiers: Vec<String> = self.cached().keys().cloned().collect();
        identifiers.sort();
        identifiers
    }

    fn cached(&self) -> Arc<HashMap<String, VerifyingKey>> {
        self.inner
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The key named `identifier`: from the cache, or after a refresh if the last fetch was
    /// at least the refresh interval ago; `None` when it is not listed.
    pub(crate) async fn key(&self, identifier: &str) -> Option<VerifyingKey> {
        if let Some(key) = self.cached().get(identifier) {
            return Some(*key);
        }
        let fetcher = self.inner.fetcher.as_ref()?;
        let mut last_fetch = self.inner.last_fetch.lock().await;
        // Another task may have fetched while this one waited.
        if let Some(key) = self.cached().get(identifier) {
            return Some(*key);
        }
        if last_fetch.is_some_and(|at| at.elapsed() < self.refresh_interval) {
            return None;
        }
        *last_fetch = Some(Instant::now());
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, fetcher.fetch()).await {
            Ok(Ok(json)) => parse(&json),
            Ok(Err(err)) => Err(PublicKeysError(ErrorChain(&*err).to_string())),
            Err(_) => Err(PublicKeysError(format!(
                "no document within {} s",
                FETCH_TIMEOUT.as_secs()
            ))),
        };
        match fetched {
            Ok(keys) => {
                let found = keys.get(identifier).copied();
                *self
                    .inner
                    .keys
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(keys);
                found
            }
            Err(err) => {
                tracing::warn!(error = %err, "fetching GitHub's secret scanning keys failed");
                None
            }
        }
    }
}

impl fmt::Debug for GithubPublicKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubPublicKeys")
            .field("identifiers", &self.identifiers())
            .field("fetched", &self.inner.fetcher.is_some())
            .field("refresh_interval", &self.refresh_interval)
            .finish()
    }
}

/// The keys of a document; a listed key that does not parse is skipped (and logged), so one
/// new key type GitHub adds does not stop the others from verifying.
fn parse(json: &[u8]) -> Result<HashMap<String, VerifyingKey>, PublicKeysError> {
    let document: Document = serde_json::from_slice(json)
        .map_err(|err| PublicKeysError(format!("not the expected JSON: {err}")))?;
    let mut keys = HashMap::new();
    for listed in document.public_keys {
        match VerifyingKey::from_public_key_pem(listed.key.trim()) {
            Ok(key) => {
                keys.insert(listed.key_identifier, key);
            }
            Err(err) => tracing::warn!(
                key_identifier = %listed.key_identifier,
                error = %err,
                "a secret scanning public key is not a P-256 key in PEM; skipped"
            ),
        }
    }
    if keys.is_empty() {
        return Err(PublicKeysError("it lists no P-256 public key".into()));
    }
    Ok(keys)
}
