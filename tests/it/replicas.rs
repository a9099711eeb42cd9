//! Several replicas on one PostgreSQL database: key lookups and pages of orders served from
//! memory, every change reaching every replica's caches within a second however it was made,
//! caches that do not answer while their listener is down, and a database outage answered
//! with fast 503s that ends by itself.
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use crate::common::pg::{demo_key_record, fresh_database, remembered, until_answering, Proxy};
use crate::common::*;
use async_trait::async_trait;
use http::StatusCode;
use partner_api::cache::{CachingKeyStore, CachingOrderStore, Notifications};
use partner_api::seed::{Seed, DEMO_KEY, DEMO_OTHER_KEY};
use partner_api::store::KeyManager;
use partner_api::store::OrderQuery;
use partner_api::testing::StoreFixtures;
use partner_api::PgStore;
use partner_api::{
    KeyDigest, KeyLookup, KeyStore, Order, OrderPage, OrderStore, Organization, PartnerApi,
    StoreError, Timestamp,
};
use sqlx::{Connection, PgConnection};

/// The bound on how long a change may take to reach every replica.
const BOUND: Duration = Duration::from_secs(1);

/// One replica: a pool of its own, its listener, and both caches.
struct Replica {
    api: PartnerApi,
    keys: CachingKeyStore<PgStore>,
    notifications: Notifications,
}

impl Replica {
    async fn start(url: &str) -> Self {
        let store = PgStore::connect_lazy(url).unwrap();
        let notifications = partner_api::cache::postgres::listen(store.pool().clone());
        let keys = CachingKeyStore::new(store.clone()).with_notifications(&notifications);
        let orders = CachingOrderStore::new(store).with_notifications(&notifications);
        let api = PartnerApi::new(keys.clone(), orders);
        let replica = Self {
            api,
            keys,
            notifications,
        };
        until_answering(&replica.notifications).await;
        replica
    }

    async fn status(&self, path: &str, key: &str) -> StatusCode {
        call(&self.api, get(path, Some(key))).await.status
    }
}

/// How long until `replica` answers `GET path` with `key` as `want`; panics past 5 s.
async fn time_until(replica: &Replica, path: &str, key: &str, want: StatusCode) -> Duration {
    let started = Instant::now();
    loop {
        if replica.status(path, key).await == want {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(5), "never {want}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn seeded() -> (String, PgStore) {
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    (url, store)
}

#[tokio::test]
async fn a_revocation_reaches_every_replicas_cache_within_the_bound() {
    crate::common::needs::needs!(Postgres);
    let (url, store) = seeded().await;
    let replicas = [Replica::start(&url).await, Replica::start(&url).await];
    for replica in &replicas {
        assert_eq!(replica.status("/v1/me", DEMO_KEY).await, StatusCode::OK);
        // Warm: answered from memory now.
        let cached = remembered(&replica.api, &replica.keys, DEMO_KEY).await;
        assert!(matches!(cached, KeyLookup::Valid(_)), "{cached:?}");
    }
    // Revoked through the crate, on another connection: both replicas refuse within the bound.
    let id = demo_key_record(&store).await.id;
    store.revoke("org_demo", &id).await.unwrap();
    for replica in &replicas {
        let delay = time_until(replica, "/v1/me", DEMO_KEY, StatusCode::UNAUTHORIZED).await;
        assert!(delay < BOUND, "{delay:?}");
    }
    // And by plain SQL.
    for replica in &replicas {
        assert_eq!(
            replica.status("/v1/orders", DEMO_OTHER_KEY).await,
            StatusCode::OK
        );
    }
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
        .bind(&KeyDigest::of(DEMO_OTHER_KEY).as_bytes()[..])
        .execute(&mut admin)
        .await
        .unwrap();
    for replica in &replicas {
        let delay = time_until(
            replica,
            "/v1/orders",
            DEMO_OTHER_KEY,
            StatusCode::UNAUTHORIZED,
        )
        .await;
        assert!(delay < BOUND, "{delay:?}");
    }
}

#[tokio::test]
async fn unknown_keys_are_remembered_until_a_key_is_added() {
    crate::common::needs::needs!(Postgres);
    let (url, store) = seeded().await;
    let replica = Replica::start(&url).await;
    let key = "pk_test_added_later_0123456789abcdef";
    assert_eq!(
        replica.status("/v1/me", key).await,
        StatusCode::UNAUTHORIZED
    );
    // A client retrying the bad key costs the database nothing more: answered from memory.
    assert_eq!(
        remembered(&replica.api, &replica.keys, key).await,
        KeyLookup::Unknown
    );
    // Adding the key (with plain SQL, say) reaches the cache like a revocation does.
    store.add_key(key, "org_demo").await.unwrap();
    let delay = time_until(&replica, "/v1/me", key, StatusCode::OK).await;
    assert!(delay < BOUND, "{delay:?}");
}

#[tokio::test]
async fn pages_of_orders_are_served_from_memory_until_the_orders_change() {
    crate::common::needs::needs!(Postgres);
    let (url, store) = seeded().await;
    let replica = Replica::start(&url).await;
    let first = call(&replica.api, get("/v1/orders", Some(DEMO_KEY))).await;
    assert_eq!(first.status, StatusCode::OK);
    let newest = order("ord_newest", BASE_MILLIS + 365 * 24 * 3_600_000);
    store.add_orders("org_demo", &[newest]).await.unwrap();
    let started = Instant::now();
    loop {
        let orders = call(&replica.api, get("/v1/orders", Some(DEMO_KEY)))
            .await
            .json();
        if orders["data"]["orders"][0]["id"] == "ord_newest" {
            break;
        }
        assert!(started.elapsed() < BOUND, "the new order never showed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn while_the_listener_is_down_the_cache_never_answers_for_a_changed_key() {
    crate::common::needs::needs!(Postgres);
    let (url, store) = seeded().await;
    let replica = Replica::start(&url).await;
    assert_eq!(replica.status("/v1/me", DEMO_KEY).await, StatusCode::OK);
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let terminated = crate::common::pg::kill_listeners(&mut admin).await;
    assert!(terminated > 0, "no listening connection found");
    // Revoked while the listener is (or may be) down: never served after the bound.
    let revoked_at = Instant::now();
    sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
        .bind(&KeyDigest::of(DEMO_KEY).as_bytes()[..])
        .execute(&mut admin)
        .await
        .unwrap();
    let _ = store;
    loop {
        let status = replica.status("/v1/me", DEMO_KEY).await;
        if revoked_at.elapsed() > BOUND {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "served after the bound");
        }
        if revoked_at.elapsed() > BOUND * 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // It reconnects by itself, starts empty, and answers from memory again.
    until_answering(&replica.notifications).await;
    assert_eq!(
        replica.status("/v1/me", DEMO_KEY).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        replica.status("/v1/me", DEMO_OTHER_KEY).await,
        StatusCode::OK
    );
    let cached = remembered(&replica.api, &replica.keys, DEMO_OTHER_KEY).await;
    assert!(matches!(cached, KeyLookup::Valid(_)), "{cached:?}");
}

/// Both stores through their caches, for the conformance suite: fixtures write to the
/// database and wait for the change to reach the caches, as a host's request would.
struct Cached {
    database: PgStore,
    keys: CachingKeyStore<PgStore>,
    orders: CachingOrderStore<PgStore>,
    _notifications: Notifications,
}

#[async_trait]
impl KeyStore for Cached {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        self.keys.lookup(digest).await
    }
    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        self.keys.lookup_now(digest)
    }
}

#[async_trait]
impl OrderStore for Cached {
    async fn orders(
        &self,
        organization: &str,
        limit: &OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        self.orders.orders(organization, limit).await
    }
    fn orders_now(
        &self,
        organization: &str,
        limit: &OrderQuery,
    ) -> Option<Result<OrderPage, StoreError>> {
        self.orders.orders_now(organization, limit)
    }
}

#[async_trait]
impl StoreFixtures for Cached {
    type Store = Self;
    type Orders = Self;
    fn store(&self) -> &Self {
        self
    }
    fn order_store(&self) -> &Self {
        self
    }
    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        self.database.add_organization(organization).await
    }
    async fn add_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        StoreFixtures::add_key(&self.database, key, organization_id, expires_at).await?;
        settle().await;
        Ok(())
    }
    async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
        self.database.revoke_key(key).await?;
        settle().await;
        Ok(())
    }
    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        self.database.add_orders(organization_id, orders).await?;
        settle().await;
        Ok(())
    }
    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError> {
        self.database
            .remove_order(organization_id, order_id)
            .await?;
        settle().await;
        Ok(())
    }
    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError> {
        self.database.update_order(organization_id, order).await?;
        settle().await;
        Ok(())
    }
}

/// Waits out the bound on a change reaching the caches.
async fn settle() {
    tokio::time::sleep(BOUND).await;
}

#[tokio::test]
async fn the_stores_pass_the_conformance_suite_through_their_caches() {
    crate::common::needs::needs!(Postgres);
    let (url, database) = seeded().await;
    let notifications = partner_api::cache::postgres::listen(database.pool().clone());
    let cached = Cached {
        keys: CachingKeyStore::new(database.clone()).with_notifications(&notifications),
        orders: CachingOrderStore::new(database.clone()).with_notifications(&notifications),
        database,
        _notifications: notifications,
    };
    let _ = url;
    partner_api::testing::run(&cached).await.assert_passed();
}

#[tokio::test]
async fn while_the_database_is_down_requests_get_fast_503s_and_it_recovers_by_itself() {
    crate::common::needs::needs!(Postgres);
    let (url, _) = seeded().await;
    let (mut proxy, proxied) = Proxy::in_front_of(&url).await;
    let store = PgStore::connect_lazy(&proxied).unwrap();
    let api = PartnerApi::from_store(store);
    assert_eq!(
        call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
        StatusCode::OK
    );

    proxy.stop().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The first failures wait for the pool; after them, every answer is a fast 503.
    for _ in 0..3 {
        let answer = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    // Over several cooldowns (so probes run meanwhile), each answer is a 503 within 100 ms.
    for _ in 0..60 {
        let started = Instant::now();
        let answer = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.header("retry-after").is_some());
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "a 503 took {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Back: the next probe finds it, and requests are served again within a second, without
    // any restart.
    proxy.resume().await;
    let started = Instant::now();
    loop {
        if call(&api, get("/v1/orders", Some(DEMO_KEY))).await.status == StatusCode::OK {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "not served within a second of the database's return"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
