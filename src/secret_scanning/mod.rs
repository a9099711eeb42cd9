//! Leaked keys revoke themselves: [`SecretScanningService`], the endpoint of GitHub's secret
//! scanning partner program (feature `secret-scanning`).
//!
//! GitHub scans public repositories, gists, issues and more for the formats of its partners'
//! secrets and POSTs every match to the partner's endpoint. This service verifies the report
//! (an ECDSA P-256 signature over the raw body, by one of [`GithubPublicKeys`]), revokes every
//! key of ours in it at once, in whichever organization it belongs to
//! ([`KeyManager::revoke_leaked`], one store call per 1,000 matches), and answers with
//! GitHub's feedback: for each match, in order, the SHA-256 of the token, its type and
//! `true_positive` (a key a store knows: active, expired or already revoked) or
//! `false_positive` (anything else, which costs no store look-up when it is not in the shape of
//! our keys).
//!
//! | request | answer |
//! |---|---|
//! | verified report, JSON array of `{"token", "type", "url", "source"}` | 200 `[{"token_hash", "token_type", "label"}, ...]` |
//! | no or several `Github-Public-Key-Identifier` / `Github-Public-Key-Signature` headers, an unknown identifier, a signature that is not base64 of a DER ECDSA signature, or one that does not verify | 401, nothing revoked |
//! | verified, but not a JSON array of matches | 400 |
//! | a body over [`MAX_BODY_BYTES`] | 413 |
//! | another method than `POST` | 405 |
//! | the key store failed | 503 (unavailable) or 500; GitHub sends the report again, and keys revoked before the failure stay revoked |
//!
//! Errors are `{"error": {"message": "..."}}`. The host is told of each newly leaked key
//! through [`with_leak_hook`](SecretScanningService::with_leak_hook) (GitHub asks partners to
//! tell the key's owner); a report sent again does not call it again.
//!
//! ```
//! use partner_api::secret_scanning::{GithubPublicKeys, SecretScanningService};
//! use partner_api::MemoryStore;
//!
//! # let document = br#"{"public_keys": [{"key_identifier": "k1", "is_current": true, "key":
//! # "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFDe1kixBIddUVXgqcpKSoUycexjt\nRxPEdTPrvC7D/pf8AwBTFr7IF4HRHjddTUpYWTloqXy/tmVVTROgVx5SNw==\n-----END PUBLIC KEY-----"}]}"#;
//! let store = MemoryStore::new();
//! let public_keys = GithubPublicKeys::from_document(document).unwrap();
//! let endpoint = SecretScanningService::new(store, public_keys).with_leak_hook(|leaked| {
//!     // Tell the organization (by email, say): never the token, which the hook does not get.
//!     println!("key {} of {} leaked", leaked.record.id, leaked.record.organization_id);
//! });
//! // Mount `endpoint` at the URL registered with GitHub, e.g. POST /secret-scanning/github.
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine;
use bytes::Bytes;
use http::header::{HeaderValue, ALLOW};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::Signature;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tower::Service;

use crate::api::body::ApiBody;
use crate::key::is_generated;
use crate::key::KeyDigest;
use crate::log::ErrorChain;
use crate::management::bodies::json;
use crate::model::Timestamp;
use crate::store::StoreErrorKind;
use crate::store::{AuditContext, SECRET_SCANNING_ACTOR};
use crate::store::{KeyManager, Leak, LeakReport, LeakedKey};

mod public_keys;

pub use public_keys::{
    GithubPublicKeys, PublicKeyFetcher, PublicKeysError, DEFAULT_REFRESH_INTERVAL, FETCH_TIMEOUT,
    GITHUB_PUBLIC_KEYS_URL,
};

/// The largest report the service reads, in bytes (1 MiB); a larger one is a 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The header naming the key GitHub signed the report with.
pub const KEY_IDENTIFIER_HEADER: &str = "github-public-key-identifier";

/// The header carrying the report's signature: base64 of an ASN.1 DER ECDSA signature.
pub const SIGNATURE_HEADER: &str = "github-public-key-signature";

/// Matches revoked per store call.
const REVOKE_BATCH: usize = 1_000;

type LeakHook = Arc<dyn Fn(&LeakedKey) + Send + Sync>;

/// The endpoint GitHub's secret scanning posts reports to: a terminal tower [`Service`]
/// (`Error = Infallible`) that revokes the leaked keys it verifies. See the
/// [module docs](self).
#[derive(Clone)]
pub struct SecretScanningService {
    keys: Arc<dyn KeyManager>,
    public_keys: GithubPublicKeys,
    on_leak: Option<LeakHook>,
}

impl SecretScanningService {
    /// Verifies reports with `public_keys` and revokes leaked keys in `keys`.
    pub fn new(keys: impl KeyManager + 'static, public_keys: GithubPublicKeys) -> Self {
        Self {
            keys: Arc::new(keys),
            public_keys,
            on_leak: None,
        }
    }

    /// Calls `hook` with the record of each key reported for the first time (revoked by now),
    /// to tell its organization. It runs on the request's task: hand slow work (an email) to
    /// a task of its own. A panic in it is caught and logged.
    #[must_use]
    pub fn with_leak_hook(mut self, hook: impl Fn(&LeakedKey) + Send + Sync + 'static) -> Self {
        self.on_leak = Some(Arc::new(hook));
        self
    }

    async fn answer<B>(self, request: Request<B>) -> Result<Response<ApiBody>, Failure>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if request.method() != Method::POST {
            return Err(Failure::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed: use POST",
            ));
        }
        let (parts, body) = request.into_parts();
        let unsigned = || {
            Failure::new(
                StatusCode::UNAUTHORIZED,
                "the report's signature does not verify",
            )
        };
        let identifier = one_header(&parts.headers, KEY_IDENTIFIER_HEADER).ok_or_else(unsigned)?;
        let signature = one_header(&parts.headers, SIGNATURE_HEADER).ok_or_else(unsigned)?;
        // Before the body is read: a made-up signature costs no megabyte of reading.
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature.trim())
            .ok()
            .and_then(|der| Signature::from_der(&der).ok())
            .ok_or_else(unsigned)?;
        let key = self
            .public_keys
            .key(identifier)
            .await
            .ok_or_else(unsigned)?;
        let body = read_body(body).await?;
        // Over the raw bytes, before anything parses them.
        key.verify(&body, &signature).map_err(|_| unsigned())?;
        // serde's own message may quote the body (a token): only where it went wrong.
        let matches: Vec<Match> = serde_json::from_slice(&body).map_err(|err| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "the report is not a JSON array of matches (at line {}, column {})",
                    err.line(),
                    err.column()
                ),
            )
        })?;
        let feedback = self.revoke(&matches).await?;
        let body = serde_json::to_value(&feedback).map_err(|_| Failure::internal())?;
        Ok(json(StatusCode::OK, &body))
    }

    /// Revokes the keys of ours among `matches` and returns the feedback for each.
    async fn revoke(&self, matches: &[Match]) -> Result<Vec<Feedback>, Failure> {
        let reported_at = Timestamp::now();
        // Only keys in our shape, with their checksum, are worth asking a store about.
        let ours: Vec<(usize, LeakReport)> = matches
            .iter()
            .enumerate()
            .filter(|(_, found)| is_generated(found.token.as_bytes()))
            .map(|(index, found)| {
                let report = LeakReport {
                    digest: KeyDigest::of(&found.token),
                    leak: Leak {
                        url: found.url.clone().unwrap_or_default(),
                        source: found.source.clone().unwrap_or_default(),
                        reported_at,
                    },
                };
                (index, report)
            })
            .collect();
        let mut true_positive = vec![false; matches.len()];
        for batch in ours.chunks(REVOKE_BATCH) {
            let reports: Vec<LeakReport> = batch.iter().map(|(_, report)| report.clone()).collect();
            // The audit log names the scanner as the one who revoked the keys.
            let found = AuditContext::new(SECRET_SCANNING_ACTOR)
                .scope(self.keys.revoke_leaked(&reports))
                .await
                .map_err(Failure::from_store)?;
            for ((index, _), leaked) in batch.iter().zip(found) {
                let Some(leaked) = leaked else { continue };
                true_positive[*index] = true;
                if let (true, Some(hook)) = (leaked.first_report, &self.on_leak) {
                    // A panicking hook must not cost GitHub its answer: the key is revoked
                    // already, and a report sent again is no first report.
                    let told = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        hook(&leaked);
                    }));
                    if told.is_err() {
                        tracing::error!(key_id = %leaked.record.id, "the leak hook panicked");
                    }
                }
            }
        }
        Ok(matches
            .iter()
            .zip(true_positive)
            .map(|(found, true_positive)| {
                crate::metrics::secret_scanning_report(
                    true_positive,
                    found.source.as_deref().unwrap_or_default(),
                );
                Feedback {
                    token_hash: hex_sha256(&found.token),
                    token_type: found.kind.clone(),
                    label: if true_positive {
                        "true_positive"
                    } else {
                        "false_positive"
                    },
                }
            })
            .collect())
    }
}

impl fmt::Debug for SecretScanningService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretScanningService")
            .field("public_keys", &self.public_keys)
            .field("leak_hook", &self.on_leak.is_some())
            .finish_non_exhaustive()
    }
}

/// One match of a report; members GitHub may add are ignored.
#[derive(Deserialize)]
struct Match {
    token: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    source: Option<String>,
}

/// GitHub's feedback for one match: never the token itself.
#[derive(Serialize)]
struct Feedback {
    token_hash: String,
    token_type: String,
    label: &'static str,
}

fn hex_sha256(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The value of the one header `name`, if there is exactly one and it is text.
fn one_header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

async fn read_body<B>(body: B) -> Result<Bytes, Failure>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err)
            if err
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the report is larger than 1 MiB",
            ))
        }
        Err(_) => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "the report could not be read",
        )),
    }
}

/// A refusal: its status and message.
struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal server error")
    }

    fn from_store(err: crate::store::StoreError) -> Self {
        tracing::error!(kind = ?err.kind(), error = %ErrorChain(&err), "revoking leaked keys failed");
        match err.kind() {
            StoreErrorKind::Unavailable => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the key store is unavailable, try again later",
            ),
            // A store without leak reports (KeyAbility::LeakReports): the host mounted the
            // endpoint over a store that cannot revoke what it is told. An ability not
            // offered answers 404, as everywhere in the crate.
            StoreErrorKind::Unsupported => Self::new(
                StatusCode::NOT_FOUND,
                "this host does not offer leak reports",
            ),
            _ => Self::internal(),
        }
    }

    fn into_response(self) -> Response<ApiBody> {
        let mut response = json(
            self.status,
            &serde_json::json!({ "error": { "message": self.message } }),
        );
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
        }
        response
    }
}

impl<B> Service<Request<B>> for SecretScanningService
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let service = self.clone();
        ResponseFuture {
            inner: Box::pin(async move {
                Ok(service
                    .answer(request)
                    .await
                    .unwrap_or_else(Failure::into_response))
            }),
        }
    }
}

/// The response future of [`SecretScanningService`].
pub struct ResponseFuture {
    inner: Pin<Box<dyn Future<Output = Result<Response<ApiBody>, Infallible>> + Send>>,
}

impl Future for ResponseFuture {
    type Output = Result<Response<ApiBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
