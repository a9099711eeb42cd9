//! Bytes allocated per request by the server side of a real hyper HTTP/1.1 connection: the
//! partner API's `GET /v1/orders` hands hyper the stored page as shared bytes, so the server
//! allocates less per request than the page's size (a copy of the page would allocate at
//! least that), and `GET /v1/me` allocates no more often than bare hyper sending the same
//! bytes. Counted, not timed: the figures are the same on any machine.
//!
//! A test binary of its own, for its counting global allocator: only allocations made on the
//! server's thread while a measured batch runs are counted.

// A global allocator cannot be written without `unsafe`; this test and the allocations bench
// are the only places.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::PartnerApi;

struct Counting;

static MEASURING: AtomicBool = AtomicBool::new(false);
/// Held by each test: the counters are the process's, so the tests measure one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread is the server's.
    static SERVER: Cell<bool> = const { Cell::new(false) };
}

fn count(bytes: usize) {
    if MEASURING.load(Ordering::Relaxed) && SERVER.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(bytes, Ordering::Relaxed);
    }
}

// SAFETY: defers every call to `System` unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Serves one connection with `service` on a thread of its own (a current-thread runtime, so
/// every server allocation is on that thread); returns the address to connect to.
fn serve<S, B>(service: S, auto: bool) -> SocketAddr
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        SERVER.with(|server| server.set(true));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let io = TokioIo::new(stream);
            if auto {
                // As the standalone host and the harness's servers serve: HTTP/1.1 or 2.
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let _ = builder.serve_connection(io, service).await;
            } else {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            }
        });
    });
    address
}

/// What a measured batch cost the server.
struct Measured {
    /// Allocations per request.
    allocations: f64,
    /// Bytes allocated per request.
    bytes: f64,
    /// The last response's body.
    body: Vec<u8>,
    /// Allocations per request that hyper's `Date` header may account for: hyper renders it
    /// again when the second changes (one allocation of the 29-byte value), so a batch that
    /// spans a change of second has one allocation more, whatever the service.
    date_allowance: f64,
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Sends `rounds` requests for `path` on one keep-alive connection to `address` (the first
/// `warm_up` of them unmeasured) and returns what the measured ones cost the server.
fn measure(address: SocketAddr, path: &str, warm_up: usize, rounds: usize) -> Measured {
    let stream = TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {DEMO_KEY}\r\n\r\n"
    );
    let mut body = Vec::new();
    let mut exchange = |body: &mut Vec<u8>| {
        writer.write_all(request.as_bytes()).unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        body.resize(length, 0);
        reader.read_exact(body).unwrap();
    };
    for _ in 0..warm_up {
        exchange(&mut body);
    }
    let (allocations, bytes) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let started = unix_seconds();
    MEASURING.store(true, Ordering::Relaxed);
    for _ in 0..rounds {
        exchange(&mut body);
    }
    MEASURING.store(false, Ordering::Relaxed);
    let seconds_changed = unix_seconds() - started;
    let per = |now: usize, before: usize| (now - before) as f64 / rounds as f64;
    Measured {
        allocations: per(ALLOCATIONS.load(Ordering::Relaxed), allocations),
        bytes: per(BYTES.load(Ordering::Relaxed), bytes),
        body,
        date_allowance: seconds_changed as f64 / rounds as f64,
    }
}

/// Bare hyper's answer: `body` as shared bytes.
type Bare = Result<Response<Full<Bytes>>, Infallible>;

/// Bare hyper answering every request with `body` as shared bytes.
fn bare(
    body: Bytes,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Bare>,
> + Send
       + 'static {
    hyper::service::service_fn(move |_| {
        let mut response = Response::new(Full::new(body.clone()));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        std::future::ready(Ok(response))
    })
}

fn api() -> PartnerApi {
    PartnerApi::from_store(Seed::demo().to_memory_store().unwrap())
}

#[test]
fn a_page_of_orders_is_handed_to_hyper_without_a_copy() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for auto in [false, true] {
        let library = measure(serve(api(), auto), "/v1/orders", 100, 1000);
        let page = library.body;
        assert!(
            page.len() > 20_000,
            "a page of 100 orders: {} bytes",
            page.len()
        );
        let bare_server = serve(bare(Bytes::from(page.clone())), auto);
        let bare = measure(bare_server, "/v1/orders", 100, 1000);
        println!(
            "bytes allocated per GET /v1/orders (a {} byte body{}): library {:.0}, bare hyper \
             {:.0}",
            page.len(),
            if auto { ", auto builder" } else { "" },
            library.bytes,
            bare.bytes,
        );
        assert!(
            bare.bytes < page.len() as f64,
            "the measure: {:.0}",
            bare.bytes
        );
        assert!(
            library.bytes < page.len() as f64,
            "{:.0} bytes allocated per request for a page of {}: the page is copied",
            library.bytes,
            page.len()
        );
    }
}

#[test]
fn a_request_for_me_allocates_as_often_as_bare_hyper_sending_the_same_bytes() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let library = measure(
        serve(api().with_request_ids(false), false),
        "/v1/me",
        100,
        1000,
    );
    let bare = measure(
        serve(bare(Bytes::from(library.body.clone())), false),
        "/v1/me",
        100,
        1000,
    );
    // Whether the library allocates per request no more often than bare hyper, past the
    // `Date` header hyper renders again when the second changes.
    let no_more = |measured: &Measured, allowance: f64| {
        measured.allocations <= bare.allocations + measured.date_allowance + allowance
    };
    // Fresh request ids (on by default) are written 64 to a buffer: two allocations a batch,
    // and 1000 requests meet at most 17 batches.
    let with_ids = measure(serve(api(), false), "/v1/me", 100, 1000);
    // A deprecated route's call counted: in the thread's map, no allocation once the key is
    // in it (the recorder writes every 10 s, past this measure; its task runs on a runtime of
    // its own, off the server's thread).
    let background = tokio::runtime::Runtime::new().unwrap();
    let _entered = background.enter();
    let counting = api()
        .with_request_ids(false)
        .with_deprecation("/me=2026-01-01".parse().unwrap())
        .with_deprecated_calls(
            partner_api::deprecated_calls::DeprecatedCallRecorder::spawn(
                Seed::demo().to_memory_store().unwrap(),
            ),
        );
    let deprecated = measure(serve(counting, false), "/v1/me", 100, 1000);
    println!(
        "allocations per GET /v1/me: library {:.3} ({:.3} with request ids, {:.3} deprecated \
         and counted), bare hyper {:.3}",
        library.allocations, with_ids.allocations, deprecated.allocations, bare.allocations
    );
    assert!(
        no_more(&library, 0.0),
        "the library allocates {:.3} times per /v1/me",
        library.allocations
    );
    assert!(
        no_more(&with_ids, 2.0 * (1000_f64 / 64.0 + 1.0).ceil() / 1000.0),
        "with request ids, {:.3} allocations per /v1/me",
        with_ids.allocations
    );
    assert!(
        no_more(&deprecated, 0.0),
        "a counted deprecated call allocates {:.3} times",
        deprecated.allocations
    );
}
