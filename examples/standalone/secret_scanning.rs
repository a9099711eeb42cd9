//! `--secret-scanning-keys`: GitHub's secret scanning endpoint at `POST /secret-scanning/github`
//! beside the API on its listener, its public keys from a file or fetched from a URL.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use partner_api::store::KeyManager;
use partner_api::{ApiBody, PartnerApi};
use tower::Service;

/// The path the endpoint answers, the one a host registers with GitHub.
pub(crate) const PATH: &str = "/secret-scanning/github";

/// The endpoint over `keys`, its public keys from `source` (a file, or an `http(s)://` URL
/// such as `partner_api::secret_scanning::GITHUB_PUBLIC_KEYS_URL`). Every newly leaked key is
/// logged at WARN, with its id, organization and where it was found, never the token.
#[cfg(feature = "secret-scanning")]
pub(crate) fn endpoint(
    source: &str,
    keys: Arc<dyn KeyManager>,
) -> Result<partner_api::secret_scanning::SecretScanningService, String> {
    use partner_api::secret_scanning::{GithubPublicKeys, SecretScanningService};

    let public_keys = if source.starts_with("https://") || source.starts_with("http://") {
        GithubPublicKeys::from_fetcher(fetcher::UrlFetcher::new(source)?)
    } else {
        let document = std::fs::read(source)
            .map_err(|err| format!("cannot read the secret scanning keys {source:?}: {err}"))?;
        GithubPublicKeys::from_document(&document).map_err(|err| err.to_string())?
    };
    Ok(
        SecretScanningService::new(keys, public_keys).with_leak_hook(|leaked| {
            let record = &leaked.record;
            let leak = record.leak.as_ref();
            tracing::warn!(
                key_id = %record.id,
                organization_id = %record.organization_id,
                url = leak.map_or("", |leak| leak.url.as_str()),
                source = leak.map_or("", |leak| leak.source.as_str()),
                "a leaked API key was revoked (reported by GitHub secret scanning)"
            );
        }),
    )
}

#[cfg(not(feature = "secret-scanning"))]
pub(crate) fn endpoint(_source: &str, _keys: Arc<dyn KeyManager>) -> Result<Endpoint, String> {
    Err("--secret-scanning-keys needs a build with secret scanning \
         (build with --features secret-scanning)"
        .into())
}

#[cfg(feature = "secret-scanning")]
pub(crate) type Endpoint = partner_api::secret_scanning::SecretScanningService;

/// Without the feature there is no endpoint; this type has no value.
#[cfg(not(feature = "secret-scanning"))]
#[derive(Clone)]
pub(crate) enum Endpoint {}

#[cfg(not(feature = "secret-scanning"))]
impl<B> Service<Request<B>> for Endpoint {
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<ApiBody>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        match *self {}
    }

    fn call(&mut self, _request: Request<B>) -> Self::Future {
        match *self {}
    }
}

/// The API, and the endpoint at [`PATH`] when there is one: one service for the host's stack.
#[derive(Clone)]
pub(crate) struct Routes {
    pub(crate) api: PartnerApi,
    pub(crate) endpoint: Option<Endpoint>,
}

impl Routes {
    /// These routes for one connection from `peer` (see [`PartnerApi::with_peer_addr`]).
    pub(crate) fn with_peer_addr(&self, peer: SocketAddr) -> Self {
        Self {
            api: self.api.clone().with_peer_addr(peer),
            endpoint: self.endpoint.clone(),
        }
    }
}

impl<B> Service<Request<B>> for Routes
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    Endpoint: Service<Request<B>, Response = Response<ApiBody>, Error = Infallible>,
{
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = RoutesFuture<<Endpoint as Service<Request<B>>>::Future>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match &mut self.endpoint {
            Some(endpoint) if request.uri().path() == PATH => RoutesFuture::Endpoint {
                future: endpoint.call(request),
            },
            _ => RoutesFuture::Api {
                future: self.api.call(request),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Routes`]: the API's, or the endpoint's.
    #[project = RoutesProjection]
    pub(crate) enum RoutesFuture<E> {
        Api { #[pin] future: partner_api::service::ResponseFuture },
        Endpoint { #[pin] future: E },
    }
}

impl<E> Future for RoutesFuture<E>
where
    E: Future<Output = Result<Response<ApiBody>, Infallible>>,
{
    type Output = Result<Response<ApiBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            RoutesProjection::Api { future } => future.poll(cx),
            RoutesProjection::Endpoint { future } => future.poll(cx),
        }
    }
}

#[cfg(feature = "secret-scanning")]
mod fetcher {
    use http_body_util::{BodyExt, Empty, Limited};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use partner_api::secret_scanning::PublicKeyFetcher;
    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// The most a key document may weigh.
    const MAX_DOCUMENT_BYTES: usize = 1 << 20;

    /// Fetches the key document from a URL over HTTPS (Mozilla's roots) or plain HTTP.
    pub(super) struct UrlFetcher {
        url: http::Uri,
        client: Client<
            hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
            Empty<bytes::Bytes>,
        >,
    }

    impl UrlFetcher {
        pub(super) fn new(url: &str) -> Result<Self, String> {
            let url: http::Uri = url
                .parse()
                .map_err(|err| format!("--secret-scanning-keys {url:?}: {err}"))?;
            // Whoever serves the keys decides which reports revoke keys: HTTPS, except on
            // this machine (a test's server).
            let loopback = url.host().is_some_and(|host| {
                host == "localhost"
                    || host
                        .trim_matches(|c| c == '[' || c == ']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|address| address.is_loopback())
            });
            if url.scheme_str() != Some("https") && !loopback {
                return Err(format!(
                    "--secret-scanning-keys {url}: the keys must come over https (plain http only from a loopback address)"
                ));
            }
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
                .map_err(|err| err.to_string())?
                .https_or_http()
                .enable_http1()
                .build();
            let client = Client::builder(TokioExecutor::new()).build(connector);
            Ok(Self { url, client })
        }
    }

    #[async_trait::async_trait]
    impl PublicKeyFetcher for UrlFetcher {
        async fn fetch(&self) -> Result<Vec<u8>, BoxError> {
            let request = http::Request::get(self.url.clone())
                .header(http::header::ACCEPT, "application/json")
                .header(
                    http::header::USER_AGENT,
                    concat!("partner-api/", env!("CARGO_PKG_VERSION")),
                )
                .body(Empty::new())?;
            let fetched = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                self.client.request(request),
            )
            .await??;
            if !fetched.status().is_success() {
                return Err(format!("{} answered {}", self.url, fetched.status()).into());
            }
            let body = Limited::new(fetched.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await?;
            Ok(body.to_bytes().to_vec())
        }
    }
}
