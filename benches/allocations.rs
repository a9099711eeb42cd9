//! Heap allocations per request: a counting global allocator around `Service::call` for each
//! route, in process. Prints one line per route; `cargo bench --bench allocations`.

// A global allocator cannot be written without `unsafe`; this bench is the one place.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use http::Request;
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{PartnerApi, PartnerApiLayer};
use tower::{Layer, Service};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers every call to `System` unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ROUNDS: usize = 1000;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let api = PartnerApi::from_store(Seed::demo().to_memory_store().expect("demo data"));
    let routes = [
        ("GET /v1/me", "/v1/me", Some(DEMO_KEY)),
        ("GET /v1/orders (100 orders)", "/v1/orders", Some(DEMO_KEY)),
        ("401 without a key", "/v1/orders", None),
        (
            "401 with an unknown key",
            "/v1/orders",
            Some("pk_test_unknown_0123456789abcdefghijk"),
        ),
        ("404", "/v1/nothing", None),
        ("GET /v1/openapi.json", "/v1/openapi.json", None),
    ];
    println!("heap allocations per request inside Service::call (request building excluded):");
    for (name, path, key) in routes {
        let per_request = runtime.block_on(async {
            let mut api = api.clone();
            let requests: Vec<Request<()>> = (0..ROUNDS).map(|_| request(path, key)).collect();
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            for request in requests {
                let response = api.call(request).await;
                drop(response);
            }
            ALLOCATIONS.load(Ordering::Relaxed) - before
        }) as f64
            / ROUNDS as f64;
        println!("  {name:<30} {per_request:.1}");
    }
    let host = tower::service_fn(|_: Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(()))
    });
    let mut mounted = PartnerApiLayer::new(api).layer(host);
    let per_request = runtime.block_on(async {
        let requests: Vec<Request<()>> = (0..ROUNDS).map(|_| request("/health", None)).collect();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for request in requests {
            drop(mounted.call(request).await);
        }
        ALLOCATIONS.load(Ordering::Relaxed) - before
    }) as f64
        / ROUNDS as f64;
    println!("  {:<30} {per_request:.1}", "layer pass-through");
}

fn request(path: &str, key: Option<&str>) -> Request<()> {
    let mut request = Request::get(path);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request.body(()).expect("request")
}
