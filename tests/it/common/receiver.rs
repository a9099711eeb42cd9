//! A webhook receiver on loopback: records every delivery and answers as a test scripts it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// One delivery as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// How the receiver answers its n-th request (from 0).
#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16),
    StatusWith(u16, &'static str, String),
    /// This status and body.
    StatusBody(u16, &'static [u8]),
    /// This status, then a body that never ends.
    StatusThenHang(u16),
    Hang,
}

/// A body that never ends.
pub struct Endless;

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Pending
    }
}

type Script = Arc<dyn Fn(usize, &Received) -> Reply + Send + Sync>;

pub struct Receiver {
    pub address: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    pub connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// A receiver that answers 204 to everything.
    pub async fn ok() -> Self {
        Self::start(|_, _| Reply::Status(204)).await
    }

    pub async fn start(script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_on("127.0.0.1:0", script).await
    }

    pub async fn start_on(
        address: &str,
        script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind(address).await.unwrap();
        let address = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let script: Script = Arc::new(script);
        let task = {
            let received = Arc::clone(&received);
            let connections = Arc::clone(&connections);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let received = Arc::clone(&received);
                    let script = Arc::clone(&script);
                    tokio::spawn(async move {
                        let service =
                            hyper::service::service_fn(move |request: Request<Incoming>| {
                                let received = Arc::clone(&received);
                                let script = Arc::clone(&script);
                                async move {
                                    let (parts, body) = request.into_parts();
                                    let body = body
                                        .collect()
                                        .await
                                        .map(|b| b.to_bytes())
                                        .unwrap_or_default();
                                    let delivery = Received {
                                        headers: parts.headers,
                                        body,
                                    };
                                    let nth = {
                                        let mut all = received.lock().unwrap();
                                        all.push(delivery.clone());
                                        all.len() - 1
                                    };
                                    let reply = script(nth, &delivery);
                                    let thanks = || {
                                        http_body_util::Either::Left(Full::new(Bytes::from_static(
                                            b"thanks",
                                        )))
                                    };
                                    let response = match reply {
                                        Reply::Status(status) => {
                                            Response::builder().status(status).body(thanks())
                                        }
                                        Reply::StatusWith(status, name, value) => {
                                            Response::builder()
                                                .status(status)
                                                .header(name, value)
                                                .body(thanks())
                                        }
                                        Reply::StatusBody(status, body) => Response::builder()
                                            .status(status)
                                            .body(http_body_util::Either::Left(Full::new(
                                                Bytes::from_static(body),
                                            ))),
                                        Reply::StatusThenHang(status) => Response::builder()
                                            .status(status)
                                            .body(http_body_util::Either::Right(Endless)),
                                        Reply::Hang => {
                                            std::future::pending::<()>().await;
                                            unreachable!()
                                        }
                                    };
                                    Ok::<_, Infallible>(response.unwrap())
                                }
                            });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Self {
            address,
            received,
            connections,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until at least `count` deliveries arrived (panics after `within`).
    pub async fn wait_for(&self, count: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {count} deliveries arrived within {within:?}",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
