//! A fresh database per PostgreSQL test, on the server `bash .ci/test` starts.

use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::{Connection, Executor, PgConnection};

/// A fresh, empty database on the test server; its URL.
pub async fn fresh_database() -> String {
    let admin = std::env::var("PARTNER_API_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "the PostgreSQL tests need a server: run them with `bash .ci/test`, which starts \
             one, or set PARTNER_API_TEST_DATABASE_URL to a server where they may create \
             databases (e.g. postgres://postgres@127.0.0.1:5432/postgres)"
        )
    });
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "partner_api_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut connection = PgConnection::connect(&admin)
        .await
        .expect("connect to the test server");
    connection
        .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
        .await
        .unwrap();
    connection
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// The record of the demo seed's key `DEMO_KEY` (labelled "Demo integration") in `store`.
pub async fn demo_key_record(store: &partner_api::PgStore) -> partner_api::management::KeyRecord {
    use partner_api::management::KeyManager;
    store
        .list("org_demo")
        .await
        .unwrap()
        .into_iter()
        .find(|record| record.label.as_deref() == Some("Demo integration"))
        .expect("the demo seed's key")
}
