//! The host's own data, mapped (#55): the conformance suite on a host's tables with other
//! names and types than the crate's, and on an orders-only store beside the crate's keys;
//! the checks of a map at start; the feed, webhooks' outbox and caches' change log written
//! from the host's own writes; an organization the host deletes takes its keys with it.
#![cfg(all(feature = "postgres", feature = "testing"))]

use async_trait::async_trait;
use partner_api::store::EventFeed;
use partner_api::testing::{run, StoreFixtures};
use partner_api::{
    KeyStore, MemoryStore, Order, OrderField, OrderPage, OrderStore, OrdersMap, Organization,
    OrganizationsMap, PgStore, SchemaMap, StoreError, Timestamp,
};
use serde_json::json;
use sqlx::Executor;

use crate::common::{call, get, pg};

/// A host's schema for the conformance suite: text ids (the suite's are text), every other
/// name and some types unlike the crate's (a budget in øre, an optional reference, a status
/// column of another name).
const HOST_SCHEMA: &str = "\
    CREATE TABLE accounts (code text PRIMARY KEY, display_name text NOT NULL); \
    CREATE TABLE media_buys (buy_ref text NOT NULL, account_code text NOT NULL, \
        channels text[] NOT NULL, advertiser text NOT NULL, campaign text NOT NULL, \
        budget_ore bigint NOT NULL, starts_on date NOT NULL, ends_on date NOT NULL, \
        state text NOT NULL, po_number text, created timestamptz NOT NULL, \
        internal_note text, modified timestamptz, PRIMARY KEY (account_code, buy_ref))";

fn host_map() -> SchemaMap {
    map_with_orders(orders_map().with(OrderField::UpdatedAt, "modified"))
}

/// [`host_map`] without `updated_at`: the host's table as if it had no column of its orders'
/// last change, which the crate then records.
fn host_map_without_updated_at() -> SchemaMap {
    map_with_orders(orders_map())
}

fn map_with_orders(orders: OrdersMap) -> SchemaMap {
    SchemaMap::new().with_orders(orders).with_organizations(
        OrganizationsMap::new("public.accounts")
            .with_id("code")
            .with_name("display_name"),
    )
}

fn orders_map() -> OrdersMap {
    OrdersMap::new("public.media_buys")
        .with(OrderField::Id, "buy_ref")
        .with(OrderField::Organization, "account_code")
        .with(OrderField::Providers, "channels")
        .with(OrderField::AdvertiserName, "advertiser")
        .with(OrderField::CampaignName, "campaign")
        .with(OrderField::BudgetDkk, "round(budget_ore / 100)")
        .with(OrderField::StartDate, "starts_on")
        .with(OrderField::EndDate, "ends_on")
        .with(OrderField::Status, "state")
        .with(OrderField::ExternalReference, "coalesce(po_number, '')")
        .with(OrderField::CreatedAt, "created")
}

/// A migrated database with [`HOST_SCHEMA`], and a store of the crate's own tables on it.
async fn with_host_schema() -> (PgStore, String) {
    let url = pg::fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(HOST_SCHEMA)
        .execute(store.pool())
        .await
        .unwrap();
    (store, url)
}

/// How many events the feeds hold of the order `order_id`.
async fn events_of(store: &PgStore, order_id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM partner_api_order_events WHERE order_id = $1")
        .bind(order_id)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// How many rows the crate's own organizations and orders tables hold: none, when the
/// host's data is mapped.
async fn copied_rows(store: &PgStore) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM partner_organizations) + (SELECT count(*) FROM partner_orders)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// A migrated database with [`HOST_SCHEMA`], and a store reading it through [`host_map`],
/// its triggers registered.
async fn host_store() -> (PgStore, String) {
    let (store, url) = with_host_schema().await;
    (registered(store, host_map()).await, url)
}

/// `store` reading through `map`, its triggers registered.
async fn registered(store: PgStore, map: SchemaMap) -> PgStore {
    let store = store.with_schema_map(map).await.unwrap();
    store.register_schema_map().await.unwrap();
    store
}

/// A registration on a database whose migrations are older than the code (no snapshot type,
/// or no columns of an order as written) is refused, naming `migrate`: its trigger would take
/// every order for one the contract cannot show, or fail every insert into the host's table.
#[tokio::test]
async fn a_registration_ahead_of_its_databases_migrations_is_refused() {
    crate::common::needs::needs!(Postgres);
    for older in [
        "DROP TYPE partner_api_order_snapshot CASCADE",
        "ALTER TABLE partner_api_order_events DROP COLUMN new_created_at",
    ] {
        let (store, _) = with_host_schema().await;
        store.pool().execute(older).await.unwrap();
        let store = store.with_schema_map(host_map()).await.unwrap();
        let refused = store.register_schema_map().await.unwrap_err();
        let message = std::error::Error::source(&refused).unwrap().to_string();
        assert!(message.contains("run `migrate`"), "{older}: {message}");
    }
}

/// An insert takes the trigger's one-statement way when the map converts the row, and the
/// general way otherwise, with the same outcomes as before it had two: a row whose conversion
/// fails (here a division by zero in the budget's expression) is in the feed with its keys,
/// unshowable; a row without an organization through the map is in none; a row converted is
/// rendered at its stamping as the contract shows it.
#[tokio::test]
async fn an_insert_the_map_cannot_convert_is_unshowable_and_one_without_an_organization_in_no_feed()
{
    crate::common::needs::needs!(Postgres);
    let (store, _) = with_host_schema().await;
    let map = map_with_orders(
        orders_map()
            .with(OrderField::Organization, "nullif(account_code, 'nobody')")
            .with(OrderField::BudgetDkk, "budget_ore / (budget_ore - 100)"),
    );
    let store = registered(store, map).await;
    let account = Organization {
        id: "acme".into(),
        name: "Acme".into(),
    };
    add_account(&store, &account).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO media_buys (buy_ref, account_code, channels, advertiser, campaign, \
            budget_ore, starts_on, ends_on, state, po_number, created) VALUES \
         ('converted', 'acme', '{meta}', 'A', 'C', 1000, '2026-03-01', '2026-04-30', 'booked', \
          'PO', '2026-02-01 10:00:00Z'), \
         ('unconvertible', 'acme', '{meta}', 'A', 'C', 100, '2026-03-01', '2026-04-30', \
          'booked', 'PO', '2026-02-01 10:00:00Z'), \
         ('orphan', 'nobody', '{meta}', 'A', 'C', 1000, '2026-03-01', '2026-04-30', 'booked', \
          'PO', '2026-02-01 10:00:00Z')",
    )
    .execute(store.pool())
    .await
    .unwrap();
    crate::common::pg::stamp_written(store.pool()).await;
    let events: Vec<(String, String, String, Option<serde_json::Value>)> = sqlx::query_as(
        "SELECT organization_id, change, order_id, order_row FROM partner_api_order_events \
         ORDER BY id",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        events,
        [
            (
                "acme".to_owned(),
                "order.created".to_owned(),
                "converted".to_owned(),
                Some(json!({
                    "id": "converted", "providers": ["meta"], "advertiser_name": "A",
                    "campaign_name": "C", "budget_dkk": 1, "start_date": "2026-03-01",
                    "end_date": "2026-04-30", "status": "booked", "external_reference": "PO",
                    "created_at": "2026-02-01T10:00:00.000000Z"
                }))
            ),
            (
                "acme".to_owned(),
                "order.created".to_owned(),
                "unconvertible".to_owned(),
                None
            ),
        ]
    );
    // Updates of a row the map converts take the update's own way: one that changes nothing
    // the map reads is no event; the providers before are those of the order as the feed
    // showed it (`[]` while it could not be shown: here a negative budget).
    sqlx::raw_sql(
        "DELETE FROM partner_api_order_events; \
         UPDATE media_buys SET budget_ore = 50 WHERE buy_ref = 'converted'; \
         UPDATE media_buys SET internal_note = 'called' WHERE buy_ref = 'converted'; \
         UPDATE media_buys SET state = 'live' WHERE buy_ref = 'converted'; \
         UPDATE media_buys SET budget_ore = 1000 WHERE buy_ref = 'converted'; \
         UPDATE media_buys SET state = 'done' WHERE buy_ref = 'converted';",
    )
    .execute(store.pool())
    .await
    .unwrap();
    crate::common::pg::stamp_written(store.pool()).await;
    let updates: Vec<(String, Option<serde_json::Value>, Option<serde_json::Value>)> =
        sqlx::query_as(
            "SELECT change, previous_providers, order_row -> 'status' \
             FROM partner_api_order_events ORDER BY id",
        )
        .fetch_all(store.pool())
        .await
        .unwrap();
    let updated = |before: serde_json::Value, status: Option<&str>| {
        (
            "order.updated".to_owned(),
            Some(before),
            status.map(|s| json!(s)),
        )
    };
    assert_eq!(
        updates,
        [
            updated(json!(["meta"]), None),
            updated(json!([]), None),
            updated(json!([]), Some("live")),
            updated(json!(["meta"]), Some("done")),
        ]
    );
}

/// [`host_store`] with the account `id` named `name`, and `key` issued to it.
async fn host_with_key(id: &str, name: &str, key: &str) -> PgStore {
    let (store, _) = host_store().await;
    let account = Organization {
        id: id.into(),
        name: name.into(),
    };
    add_account(&store, &account).await.unwrap();
    // The crate's own organizations table is never asked: keys issue to the host's.
    StoreFixtures::add_key(&store, key, id, None).await.unwrap();
    store
}

/// Writes the host's way: into its own tables.
async fn add_account(store: &PgStore, organization: &Organization) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO accounts (code, display_name) VALUES ($1, $2)")
        .bind(&organization.id)
        .bind(&organization.name)
        .execute(store.pool())
        .await
        .map(drop)
        .map_err(StoreError::other)
}

async fn write_buy(store: &PgStore, account: &str, order: &Order) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO media_buys (buy_ref, account_code, channels, advertiser, campaign, \
         budget_ore, starts_on, ends_on, state, po_number, created) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULLIF($10, ''), $11) \
         ON CONFLICT (account_code, buy_ref) DO UPDATE SET channels = EXCLUDED.channels, \
         advertiser = EXCLUDED.advertiser, campaign = EXCLUDED.campaign, \
         budget_ore = EXCLUDED.budget_ore, starts_on = EXCLUDED.starts_on, \
         ends_on = EXCLUDED.ends_on, state = EXCLUDED.state, po_number = EXCLUDED.po_number, \
         created = EXCLUDED.created, \
         modified = CASE WHEN (media_buys.channels, media_buys.advertiser, media_buys.campaign, \
           media_buys.budget_ore, media_buys.starts_on, media_buys.ends_on, media_buys.state, \
           media_buys.po_number, media_buys.created) IS DISTINCT FROM (EXCLUDED.channels, \
           EXCLUDED.advertiser, EXCLUDED.campaign, EXCLUDED.budget_ore, EXCLUDED.starts_on, \
           EXCLUDED.ends_on, EXCLUDED.state, EXCLUDED.po_number, EXCLUDED.created) \
           THEN clock_timestamp() ELSE media_buys.modified END",
    )
    .bind(&order.id)
    .bind(account)
    .bind(&order.providers)
    .bind(&order.advertiser_name)
    .bind(&order.campaign_name)
    .bind(i64::try_from(order.budget_dkk).unwrap() * 100)
    .bind(order.start_date)
    .bind(order.end_date)
    .bind(&order.status)
    .bind(&order.external_reference)
    .bind(order.created_at.as_datetime())
    .execute(store.pool())
    .await
    .map(drop)
    .map_err(StoreError::other)
}

async fn delete_buy(store: &PgStore, account: &str, id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM media_buys WHERE account_code = $1 AND buy_ref = $2")
        .bind(account)
        .bind(id)
        .execute(store.pool())
        .await
        .map(drop)
        .map_err(StoreError::other)
}

/// The crate's keys and the host's organizations and orders, all in PostgreSQL.
struct HostTables(PgStore);

#[async_trait]
impl StoreFixtures for HostTables {
    type Store = PgStore;
    type Orders = PgStore;
    fn store(&self) -> &PgStore {
        &self.0
    }
    fn order_store(&self) -> &PgStore {
        &self.0
    }
    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        add_account(&self.0, organization).await
    }
    async fn add_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        StoreFixtures::add_key(&self.0, key, organization_id, expires_at).await
    }
    async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
        StoreFixtures::revoke_key(&self.0, key).await
    }
    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        for order in orders {
            partner_api::EncodedOrder::new(order.clone()).map_err(StoreError::invalid_data)?;
            write_buy(&self.0, organization_id, order).await?;
        }
        Ok(())
    }
    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError> {
        delete_buy(&self.0, organization_id, order_id).await
    }
    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError> {
        write_buy(&self.0, organization_id, order).await
    }
}

#[tokio::test]
async fn the_store_conforms_on_the_hosts_own_tables_through_a_map() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = host_store().await;
    run(&HostTables(store.clone())).await.assert_passed();
    // Nothing was copied into the crate's tables.
    let copied = copied_rows(&store).await;
    assert_eq!(copied, 0);
}

#[tokio::test]
async fn a_table_without_a_last_change_column_conforms_with_the_time_the_crate_recorded() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = with_host_schema().await;
    let store = registered(store, host_map_without_updated_at()).await;
    // Rule last-change among them: an update moves updatedAt, a write that changes nothing
    // does not, and the updated_since/updated_before filters hold through pages.
    run(&HostTables(store.clone())).await.assert_passed();
    assert_eq!(copied_rows(&store).await, 0);
}

/// The last change the crate recorded of `id` in the account `acme`, as a page serves it.
async fn recorded_last_change(store: &PgStore, id: &str) -> Option<Timestamp> {
    let page = store
        .orders("acme", &partner_api::store::OrderQuery::default())
        .await
        .unwrap();
    let encoded = page
        .orders()
        .iter()
        .find(|order| order.order().id == id)
        .unwrap_or_else(|| panic!("{id} is on the page"));
    let served: serde_json::Value = serde_json::from_slice(encoded.json()).unwrap();
    assert_eq!(
        served["updatedAt"],
        encoded.order().last_changed_at().to_string(),
        "{id} is served with its last change"
    );
    encoded.order().updated_at
}

/// One call of retention keeping nothing: what it deleted.
async fn prune_now(store: &PgStore) -> u64 {
    store
        .prune_events(std::time::Duration::ZERO, 1_000)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_recorded_last_change_outlives_retention_and_a_remade_order_starts_unchanged() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = with_host_schema().await;
    let store = registered(store, host_map_without_updated_at()).await;
    // The index the recorded time is read through is listed, and once built, found.
    let needed = store.schema_indexes();
    assert!(
        needed.iter().any(|index| index
            .statement()
            .contains("partner_api_order_events_changes")),
        "{needed:?}"
    );
    for index in &needed {
        sqlx::raw_sql(&index.statement())
            .execute(store.pool())
            .await
            .unwrap();
    }
    assert_eq!(store.missing_schema_indexes().await.unwrap(), []);
    let acme = Organization {
        id: "acme".into(),
        name: "Acme".into(),
    };
    add_account(&store, &acme).await.unwrap();
    let created = 1_700_000_000_000;
    let buy = crate::common::order("b1", created);
    write_buy(&store, "acme", &buy).await.unwrap();
    write_buy(&store, "acme", &crate::common::order("b2", created + 1))
        .await
        .unwrap();
    assert_eq!(recorded_last_change(&store, "b1").await, None);

    let before = Timestamp::now();
    let paused = Order {
        status: "paused".into(),
        ..buy.clone()
    };
    write_buy(&store, "acme", &paused).await.unwrap();
    let changed = recorded_last_change(&store, "b1")
        .await
        .expect("an update is a last change");
    assert!(changed >= before.saturating_sub(std::time::Duration::from_secs(5)));
    assert_eq!(recorded_last_change(&store, "b2").await, None);
    // A write that changes nothing the map reads is no change.
    write_buy(&store, "acme", &paused).await.unwrap();
    assert_eq!(recorded_last_change(&store, "b1").await, Some(changed));

    // Retention deletes the update's event (a later order keeps the feed's newest); the time
    // stays. Its first call gives the unread events their positions (an event is kept from
    // when it became readable), its second deletes them.
    write_buy(&store, "acme", &crate::common::order("b3", created + 2))
        .await
        .unwrap();
    assert_eq!(prune_now(&store).await, 0);
    let deleted = prune_now(&store).await;
    assert!(deleted >= 3, "retention deleted {deleted} events");
    assert_eq!(events_of(&store, "b1").await, 0);
    assert_eq!(recorded_last_change(&store, "b1").await, Some(changed));

    // Deleted and made again: a new order, never changed, whether or not the deletion's
    // event is still kept.
    delete_buy(&store, "acme", "b1").await.unwrap();
    write_buy(&store, "acme", &buy).await.unwrap();
    assert_eq!(recorded_last_change(&store, "b1").await, None);
    write_buy(&store, "acme", &crate::common::order("b4", created + 3))
        .await
        .unwrap();
    prune_now(&store).await;
    prune_now(&store).await;
    assert_eq!(events_of(&store, "b1").await, 0);
    assert_eq!(recorded_last_change(&store, "b1").await, None);
    let carried: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM partner_api_order_last_changes WHERE order_id = 'b1'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(carried, 0, "a deleted order's carried time goes with it");

    // Changed again: the new change, read from its event.
    let before = Timestamp::now();
    write_buy(&store, "acme", &paused).await.unwrap();
    let again = recorded_last_change(&store, "b1").await.expect("changed");
    assert!(again >= before.saturating_sub(std::time::Duration::from_secs(5)));

    // A map that names the column turns the carrying off, and what was carried goes (it
    // would be stale if turned on again).
    let b2 = crate::common::order("b2", created + 1);
    write_buy(
        &store,
        "acme",
        &Order {
            status: "paused".into(),
            ..b2
        },
    )
    .await
    .unwrap();
    write_buy(&store, "acme", &crate::common::order("b5", created + 4))
        .await
        .unwrap();
    prune_now(&store).await;
    prune_now(&store).await;
    let carried: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM partner_api_order_last_changes WHERE order_id = 'b2'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(carried, 1, "b2's change is carried past its event");
    registered(store.clone(), host_map()).await;
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM partner_api_order_last_changes")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(kept, 0);
}

/// An [`OrderStore`] and nothing else: the host's orders beside keys kept elsewhere.
struct OrdersOnly(PgStore);

#[async_trait]
impl OrderStore for OrdersOnly {
    async fn orders(
        &self,
        organization_id: &str,
        query: &partner_api::store::OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        self.0.orders(organization_id, query).await
    }
}

/// Keys in memory, orders in the host's table through an orders-only store.
struct KeysBesideOrders {
    keys: MemoryStore,
    orders: OrdersOnly,
}

#[async_trait]
impl StoreFixtures for KeysBesideOrders {
    type Store = MemoryStore;
    type Orders = OrdersOnly;
    fn store(&self) -> &MemoryStore {
        &self.keys
    }
    fn order_store(&self) -> &OrdersOnly {
        &self.orders
    }
    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        self.keys.add_organization(organization.clone())?;
        add_account(&self.orders.0, organization).await
    }
    async fn add_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        StoreFixtures::add_key(&self.keys, key, organization_id, expires_at).await
    }
    async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
        StoreFixtures::revoke_key(&self.keys, key).await
    }
    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        HostTables(self.orders.0.clone())
            .add_orders(organization_id, orders)
            .await
    }
    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError> {
        delete_buy(&self.orders.0, organization_id, order_id).await
    }
    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError> {
        write_buy(&self.orders.0, organization_id, order).await
    }
}

#[tokio::test]
async fn the_suite_checks_an_orders_only_store_beside_keys_kept_elsewhere() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = host_store().await;
    let fixtures = KeysBesideOrders {
        keys: MemoryStore::new(),
        orders: OrdersOnly(store),
    };
    run(&fixtures).await.assert_passed();
}

#[tokio::test]
async fn a_map_of_the_wrong_type_is_refused_naming_the_field_expression_and_types() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = with_host_schema().await;
    let refused = |map: SchemaMap| {
        let store = store.clone();
        async move {
            let refused = store.with_schema_map(map).await.expect_err("refused");
            let mut message = refused.to_string();
            let mut source = std::error::Error::source(&refused);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            message
        }
    };
    let orders = || match host_map().orders() {
        Some(orders) => orders.clone(),
        None => unreachable!(),
    };
    let message = refused(
        SchemaMap::new().with_orders(orders().with(OrderField::CreatedAt, "created::timestamp")),
    )
    .await;
    assert!(
        message.contains(
            "[orders] created_at = \"created::timestamp\" has type timestamp without time zone"
        ) && message.contains("needs timestamp with time zone"),
        "{message}"
    );
    let message =
        refused(SchemaMap::new().with_orders(orders().with(OrderField::BudgetDkk, "advertiser")))
            .await;
    assert!(
        message.contains("[orders] budget_dkk = \"advertiser\" has type text")
            && message.contains("needs a number"),
        "{message}"
    );
    let message = refused(
        SchemaMap::new().with_orders(orders().with(OrderField::Providers, "no_such_column")),
    )
    .await;
    assert!(
        message.contains("[orders] providers = \"no_such_column\"")
            && message.contains("does not exist"),
        "{message}"
    );
    let message = refused(SchemaMap::new().with_orders(OrdersMap::new("public.nowhere"))).await;
    assert!(
        message.contains("[orders] table = \"public.nowhere\""),
        "{message}"
    );
    let message = refused(
        SchemaMap::new().with_organizations(
            OrganizationsMap::new("accounts")
                .with_id("code")
                .with_name("42"),
        ),
    )
    .await;
    assert!(
        message.contains("[organizations] name = \"42\" has type integer"),
        "{message}"
    );
}

#[tokio::test]
async fn the_hosts_writes_make_one_record_each_for_the_feed_the_caches_and_the_outbox() {
    crate::common::needs::needs!(Postgres);
    let key = "pk_test_host_data_feed_key_0123456789";
    let store = host_with_key("acme", "Acme Media", key).await;
    let api = partner_api::PartnerApi::from_store(store.clone()).with_events(store.clone());

    let me = call(&api, get("/v1/me", Some(key))).await;
    assert_eq!(
        me.json()["data"]["organization"]["name"],
        json!("Acme Media")
    );

    let order = crate::common::order("buy-1", 1_700_000_000_000);
    write_buy(&store, "acme", &order).await.unwrap();
    // A column the map does not read changes nothing a partner sees: no event.
    sqlx::query("UPDATE media_buys SET internal_note = 'called them' WHERE buy_ref = 'buy-1'")
        .execute(store.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE media_buys SET state = 'paused' WHERE buy_ref = 'buy-1'")
        .execute(store.pool())
        .await
        .unwrap();
    // A write the contract cannot show (a negative budget) is in the feed, marked.
    sqlx::query("UPDATE media_buys SET budget_ore = -100 WHERE buy_ref = 'buy-1'")
        .execute(store.pool())
        .await
        .unwrap();
    delete_buy(&store, "acme", "buy-1").await.unwrap();

    let feed = call(&api, get("/v1/events", Some(key))).await;
    assert_eq!(feed.status, http::StatusCode::OK, "{:?}", feed.json());
    let events = feed.json()["data"]["events"].as_array().unwrap().clone();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "order.created",
            "order.updated",
            "order.updated",
            "order.deleted"
        ]
    );
    let pages = call(&api, get("/v1/orders", Some(key))).await;
    assert_eq!(pages.json()["data"]["orders"], json!([]));
    let created = &events[0]["data"];
    assert_eq!(created["id"], json!("buy-1"));
    assert_eq!(created["budgetDkk"], json!(order.budget_dkk));
    assert_eq!(events[1]["data"]["status"], json!("paused"));
    assert_eq!(
        events[2]["data"],
        json!({"id": "buy-1", "unshowable": true})
    );
    assert_eq!(events[3]["data"], json!({"id": "buy-1"}));
    // One record per change, which is what the caches read too, under the mapped
    // organization.
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM partner_api_order_events")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(records, 4);
    let read: Vec<String> =
        sqlx::query_scalar("SELECT changes FROM partner_api_order_changes_after(0)")
            .fetch_one(store.pool())
            .await
            .unwrap();
    let organizations: Vec<&str> = read.iter().map(|c| c.split_once(' ').unwrap().1).collect();
    assert_eq!(organizations, ["acme"; 4]);
    // TRUNCATE of the host's served table is refused, as of the crate's.
    let truncated = store.pool().execute("TRUNCATE media_buys").await;
    assert!(
        truncated.unwrap_err().to_string().contains("TRUNCATE"),
        "a served table is never truncated"
    );
}

#[tokio::test]
async fn an_organization_the_host_deletes_takes_its_keys_and_no_copy_is_needed() {
    crate::common::needs::needs!(Postgres);
    let key = "pk_test_host_data_gone_key_0123456789";
    let store = host_with_key("gone", "Gone Ltd", key).await;
    let digest = partner_api::KeyDigest::of(key);
    let found = store.lookup(&digest).await.unwrap();
    assert_eq!(
        found.into_principal().unwrap().organization.name,
        "Gone Ltd"
    );
    // A rename or a deletion tells every replica's key caches (one notification, '*').
    let mut listener = sqlx::postgres::PgListener::connect_with(store.pool())
        .await
        .unwrap();
    listener.listen("partner_api_keys").await.unwrap();
    sqlx::query("UPDATE accounts SET display_name = 'Gone Group' WHERE code = 'gone'")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(listener.recv().await.unwrap().payload(), "*");
    sqlx::query("DELETE FROM accounts WHERE code = 'gone'")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(listener.recv().await.unwrap().payload(), "*");
    assert_eq!(
        store.lookup(&digest).await.unwrap(),
        partner_api::KeyLookup::Unknown
    );
    // The crate writes no organization or order of the host's.
    let refused = store
        .add_organization(&Organization {
            id: "x".into(),
            name: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), partner_api::StoreErrorKind::Unsupported);
    let refused = store.add_orders("x", &[]).await.unwrap_err();
    assert_eq!(refused.kind(), partner_api::StoreErrorKind::Unsupported);
}

#[tokio::test]
async fn a_role_that_only_writes_orders_raises_events_and_cannot_borrow_the_trigger() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = host_store().await;
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let writer = format!("{database}_writer");
    sqlx::raw_sql(&format!(
        "DROP ROLE IF EXISTS {writer}; \
         CREATE ROLE {writer} LOGIN PASSWORD 'change me'; \
         GRANT USAGE, CREATE ON SCHEMA public TO {writer}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON media_buys TO {writer}; \
         INSERT INTO accounts VALUES ('acme', 'Acme')"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let as_writer = PgStore::connect_lazy(&pg::as_user(&url, &writer)).unwrap();
    // A function the writer plants where a bare `round(bigint)` could find it: the trigger,
    // which runs the map as the owner, resolves in pg_catalog alone and never calls it.
    as_writer
        .pool()
        .execute(
            "CREATE FUNCTION public.round(bigint) RETURNS double precision LANGUAGE sql \
             AS 'SELECT 1::double precision / 0'",
        )
        .await
        .unwrap();
    let order = crate::common::order("by-writer", 1_700_000_000_000);
    write_buy(&as_writer, "acme", &order).await.unwrap();
    crate::common::pg::stamp_written(store.pool()).await;
    let snapshot: serde_json::Value = sqlx::query_scalar(
        "SELECT order_row FROM partner_api_order_events WHERE order_id = 'by-writer'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        snapshot["budget_dkk"],
        json!(order.budget_dkk),
        "pg_catalog's round"
    );
    let events = events_of(&store, "by-writer").await;
    assert_eq!(events, 1, "the writer's insert raised its event");
    // The writer cannot forge events: no right on the events table, nor to attach the
    // crate's trigger function to a table of its own (and the function refuses any table
    // but the one it serves: the owner's attempt below).
    let forged = as_writer
        .pool()
        .execute("INSERT INTO partner_api_order_events (organization_id, change, order_id) VALUES ('acme', 'order.created', 'forged')")
        .await;
    assert!(forged.is_err());
    for statement in [
        "ALTER TYPE partner_api_order_snapshot RENAME ATTRIBUTE id TO order_id",
        "DROP TYPE partner_api_order_snapshot",
    ] {
        let refused = as_writer
            .pool()
            .execute(statement)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("must be owner"),
            "the writer: {statement}: {refused}"
        );
    }
    let function: String = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p \
         WHERE p.proname LIKE 'partner\\_api\\_orders\\_media\\_buys\\_%'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let borrow = format!(
        "CREATE TABLE mine (LIKE media_buys); \
         CREATE TRIGGER borrowed AFTER INSERT ON mine FOR EACH ROW EXECUTE FUNCTION {function}"
    );
    let attached = sqlx::raw_sql(&borrow).execute(as_writer.pool()).await;
    assert!(
        attached
            .unwrap_err()
            .to_string()
            .contains("permission denied"),
        "only the owner may attach the crate's trigger"
    );
    sqlx::raw_sql(&borrow).execute(store.pool()).await.unwrap();
    let borrowed = store
        .pool()
        .execute("INSERT INTO mine (buy_ref, account_code, channels, advertiser, campaign, budget_ore, starts_on, ends_on, state, created) VALUES ('f', 'acme', '{}', 'a', 'c', 1, '2026-01-01', '2026-01-02', 's', now())")
        .await;
    assert!(
        borrowed
            .unwrap_err()
            .to_string()
            .contains("does not serve the table"),
        "the trigger refuses a table it does not serve"
    );
}

#[tokio::test]
async fn a_registration_again_changes_nothing_and_a_renamed_table_stays_served() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = host_store().await;
    let made = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
             WHERE c.relname = 'media_buys' AND NOT t.tgisinternal",
        )
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    let first: Vec<i64> = sqlx::query_scalar(
        "SELECT t.oid::bigint FROM pg_trigger t WHERE t.tgname = 'partner_api_orders'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        made().await,
        2,
        "the orders' trigger and the TRUNCATE refusal"
    );
    store.register_schema_map().await.unwrap();
    let again: Vec<i64> = sqlx::query_scalar(
        "SELECT t.oid::bigint FROM pg_trigger t WHERE t.tgname = 'partner_api_orders'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(first, again, "the same trigger: not dropped and made again");
    // The host renames its table: its writes still raise their events (the trigger checks
    // the table's registration, which follows the table).
    sqlx::raw_sql(
        "ALTER TABLE media_buys RENAME TO media_buys_2026; \
         INSERT INTO accounts VALUES ('acme', 'Acme')",
    )
    .execute(store.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO media_buys_2026 (buy_ref, account_code, channels, advertiser, campaign, \
         budget_ore, starts_on, ends_on, state, created) \
         VALUES ('renamed', 'acme', '{}', 'a', 'c', 100, '2026-01-01', '2026-01-02', 's', now())",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let events = events_of(&store, "renamed").await;
    assert_eq!(events, 1);
}

#[tokio::test]
async fn a_partitioned_table_is_refused_naming_what_to_map_instead() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = with_host_schema().await;
    sqlx::raw_sql(
        "CREATE TABLE parted (LIKE media_buys) PARTITION BY RANGE (created); \
         CREATE TABLE parted_2026 PARTITION OF parted \
           FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let map = match host_map().orders() {
        Some(orders) => {
            let mut parted = OrdersMap::new("public.parted");
            for field in OrderField::ALL {
                parted = parted.with(field, orders.expression(field));
            }
            SchemaMap::new().with_orders(parted)
        }
        None => unreachable!(),
    };
    let refused = store.with_schema_map(map).await.unwrap_err();
    let mut message = refused.to_string();
    if let Some(source) = std::error::Error::source(&refused) {
        message.push_str(&format!(": {source}"));
    }
    assert!(
        message.contains("is a partitioned table") && message.contains("map a view"),
        "{message}"
    );
}

/// The hosting page's example, as written: the host's `media_buys` and `accounts`.
const MEDIA_BUYS: &str = "\
    CREATE TABLE public.accounts (id bigserial PRIMARY KEY, display_name text NOT NULL); \
    CREATE TABLE public.media_buys (buy_id uuid PRIMARY KEY DEFAULT gen_random_uuid(), \
        account_id bigint NOT NULL REFERENCES public.accounts (id), channels text[] NOT NULL, \
        advertiser text NOT NULL, campaign text NOT NULL, budget_ore bigint NOT NULL, \
        starts_on date NOT NULL, ends_on date NOT NULL, state text NOT NULL, \
        po_number text, created timestamptz NOT NULL DEFAULT now())";

/// The schema map of the hosting page, read from its TOML block: what a host copies.
fn documented_schema_map() -> String {
    let docs = include_str!("../../src/docs/hosting.md");
    let block = docs
        .split("```toml")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the TOML block of the hosting page");
    block.trim().to_owned()
}

/// Polls `check` until it holds, for at most 5 s (the caches' 1 s bound, with room for a
/// loaded machine); panics naming `what` otherwise.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_standalone_host_serves_media_buys_and_accounts_through_schema_map_on_two_replicas() {
    use crate::common::net::{fetch, http1, read_feed, temp_file};
    use crate::common::{standalone_command, Process};
    use http::Method;
    crate::common::needs::needs!(Postgres, Examples);
    let url = pg::fresh_database().await;
    let owner = PgStore::connect_lazy(&url).unwrap();
    sqlx::raw_sql(MEDIA_BUYS)
        .execute(owner.pool())
        .await
        .unwrap();
    let map = temp_file("schema-map.toml", &documented_schema_map());
    let map = map.to_str().unwrap();
    let global = ["--database-url", &url, "--schema-map", map];
    let command = |args: &[&str]| {
        let full: Vec<String> = global
            .iter()
            .chain(args)
            .map(|arg| arg.to_string())
            .collect();
        async move {
            let full: Vec<&str> = full.iter().map(String::as_str).collect();
            standalone_command(&full).await
        }
    };

    // The owner migrates: the crate's tables, and its triggers on the host's.
    let (ok, out, err) = command(&["migrate"]).await;
    assert!(ok, "{out}{err}");
    // The indexes the map needs, printed; built; then none missing.
    let (ok, out, err) = command(&["indexes"]).await;
    assert!(ok, "{err}");
    let statements: Vec<&str> = out.lines().collect();
    // The documented map has no updated_at: the events' index of the recorded last change
    // is among them.
    assert_eq!(statements.len(), 5, "{out}");
    assert!(
        out.contains(" partner_api_order_events_changes ON "),
        "{out}"
    );
    assert!(statements
        .iter()
        .all(|line| line.starts_with("CREATE INDEX CONCURRENTLY IF NOT EXISTS ")));
    let (_, missing, _) = command(&["indexes", "--missing"]).await;
    assert_eq!(missing.lines().count(), 5, "{missing}");
    // A server started now warns once of each.
    let log = temp_file("schema-map-warnings.log", "");
    {
        let mut args = global.to_vec();
        args.extend(["--listen", "127.0.0.1:0", "--no-migrate"]);
        let mut early = Process::spawn_with_stderr(&args, &[], &log);
        early.base_url().await;
    }
    let warned = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        warned
            .matches("an index the schema map needs is missing")
            .count(),
        5,
        "{warned}"
    );
    for statement in &statements {
        owner.pool().execute(*statement).await.unwrap();
    }
    let (ok, missing, err) = command(&["indexes", "--missing"]).await;
    assert!(ok && missing.is_empty(), "{missing}{err}");
    // A provider's own index, on the host's table through the map: the same for the list in
    // any order; missing until built.
    let (ok, own, err) = command(&["indexes", "--provider", "tiktok", "--provider", "meta"]).await;
    assert!(ok, "{err}");
    assert_eq!(own.lines().count(), 1, "{own}");
    assert!(
        own.starts_with("CREATE INDEX CONCURRENTLY IF NOT EXISTS partner_api_for_")
            && own.contains(" ON public.media_buys ")
            && own.contains("ARRAY[E'meta', E'tiktok']::text[]"),
        "{own}"
    );
    let (_, again, _) = command(&["indexes", "--provider", "meta", "--provider", "tiktok"]).await;
    assert_eq!(again, own);
    let args = [
        "indexes",
        "--missing",
        "--provider",
        "meta",
        "--provider",
        "tiktok",
    ];
    let (_, missing, _) = command(&args).await;
    assert_eq!(missing, own);
    owner.pool().execute(own.trim()).await.unwrap();
    let (ok, missing, err) = command(&args).await;
    assert!(ok && missing.is_empty(), "{missing}{err}");
    let (ok, _, err) = command(&["indexes", "--provider", ""]).await;
    assert!(!ok && err.contains("provider \"\" must be"), "{err}");

    // The host's data, written the host's way.
    sqlx::raw_sql(
        "INSERT INTO accounts (display_name) VALUES ('Acme Media'), ('Other Co'); \
         INSERT INTO media_buys (account_id, channels, advertiser, campaign, budget_ore, \
             starts_on, ends_on, state, po_number, created) \
         SELECT 1, CASE WHEN n % 3 = 0 THEN ARRAY['meta'] ELSE ARRAY['google', 'tiktok'] END, \
             'Advertiser ' || n, 'Campaign ' || n, n * 10050, DATE '2026-01-01', \
             DATE '2026-02-01', CASE WHEN n % 2 = 0 THEN 'ACTIVE' ELSE 'PAUSED' END, \
             CASE WHEN n % 5 = 0 THEN NULL ELSE 'PO-' || n END, \
             TIMESTAMPTZ '2026-01-01 00:00:00Z' + n * interval '1 minute' \
         FROM generate_series(1, 150) AS n; \
         INSERT INTO media_buys (account_id, channels, advertiser, campaign, budget_ore, \
             starts_on, ends_on, state) \
         VALUES (2, ARRAY['meta'], 'Theirs', 'Theirs', 100, DATE '2026-01-01', \
             DATE '2026-01-02', 'ACTIVE')",
    )
    .execute(owner.pool())
    .await
    .unwrap();
    let (ok, out, err) = command(&["keys", "issue", "--organization", "1"]).await;
    assert!(ok, "{err}");
    let key = out.lines().next().unwrap().to_owned();
    let (ok, _, err) = command(&["keys", "issue", "--organization", "404"]).await;
    assert!(!ok && err.contains("404"), "{err}");

    // Two replicas with their caches, serving the host's tables.
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut args = global.to_vec();
        args.extend(["--listen", "127.0.0.1:0", "--no-migrate"]);
        let mut replica = Process::spawn(&args);
        let base = replica.base_url().await;
        replicas.push((replica, base));
    }
    let client = http1();
    for (_, base) in &replicas {
        let me = fetch(&client, Method::GET, format!("{base}/v1/me"), Some(&key)).await;
        assert_eq!(me.status, http::StatusCode::OK);
        assert_eq!(
            me.json()["data"]["organization"],
            json!({"id": "1", "name": "Acme Media"})
        );
    }
    let base = replicas[0].1.clone();
    // Every page, newest first, through the Link of each; the mapped fields as mapped.
    let mut ids = Vec::new();
    let mut path = "/v1/orders?limit=40".to_owned();
    loop {
        let page = fetch(&client, Method::GET, format!("{base}{path}"), Some(&key)).await;
        assert_eq!(page.status, http::StatusCode::OK, "{path}");
        for order in page.json()["data"]["orders"].as_array().unwrap() {
            ids.push(order["campaignName"].as_str().unwrap().to_owned());
        }
        match page.header("link") {
            Some(link) if link.contains("rel=\"next\"") => {
                path = link[1..link.find('>').unwrap()].to_owned();
            }
            _ => break,
        }
    }
    let expected: Vec<String> = (1..=150).rev().map(|n| format!("Campaign {n}")).collect();
    assert_eq!(
        ids, expected,
        "every order once, newest first, none of another account"
    );
    let newest = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/orders?limit=1"),
        Some(&key),
    )
    .await;
    let order = &newest.json()["data"]["orders"][0];
    assert_eq!(order["budgetDkk"], json!(15075), "round(1507500 / 100)");
    assert_eq!(order["status"], json!("active"));
    assert_eq!(
        order["externalReference"],
        json!(""),
        "coalesce(po_number, '')"
    );
    assert_eq!(order["createdAt"], json!("2026-01-01T02:30:00.000Z"));
    // Every filter, through the map.
    let count = |query: &'static str| {
        let (client, base, key) = (client.clone(), base.clone(), key.clone());
        async move {
            let mut total = 0;
            let mut path = format!("/v1/orders?{query}");
            loop {
                let page = fetch(&client, Method::GET, format!("{base}{path}"), Some(&key)).await;
                assert_eq!(
                    page.status,
                    http::StatusCode::OK,
                    "{path}: {:?}",
                    page.json()
                );
                total += page.json()["data"]["orders"].as_array().unwrap().len();
                match page.header("link") {
                    Some(link) if link.contains("rel=\"next\"") => {
                        path = link[1..link.find('>').unwrap()].to_owned();
                    }
                    _ => return total,
                }
            }
        }
    };
    assert_eq!(count("status=active").await, 75);
    assert_eq!(count("provider=meta").await, 50);
    assert_eq!(count("provider=meta&status=paused").await, 25);
    assert_eq!(
        count("created_since=2026-01-01T01:00:00Z&created_before=2026-01-01T02:00:00Z").await,
        60
    );

    // The feed: every buy's creation, from the host's own inserts.
    let (events, _) = read_feed(&client, &base, &key, "/v1/events?limit=100").await;
    assert_eq!(events.len(), 150);
    assert!(events.iter().all(|event| event["type"] == "order.created"));

    // A change the host makes reaches both replicas' caches; so does an account renamed.
    sqlx::query("UPDATE media_buys SET state = 'DONE' WHERE campaign = 'Campaign 150'")
        .execute(owner.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE accounts SET display_name = 'Acme Group' WHERE id = 1")
        .execute(owner.pool())
        .await
        .unwrap();
    for (_, base) in &replicas {
        eventually("the change reaches the replica's caches", || {
            let (client, base, key) = (client.clone(), base.clone(), key.clone());
            async move {
                let page = fetch(
                    &client,
                    Method::GET,
                    format!("{base}/v1/orders?limit=1"),
                    Some(&key),
                )
                .await;
                let me = fetch(&client, Method::GET, format!("{base}/v1/me"), Some(&key)).await;
                page.json()["data"]["orders"][0]["status"] == "done"
                    && me.json()["data"]["organization"]["name"] == "Acme Group"
            }
        })
        .await;
    }
    // Webhooks: an endpoint's messages are raised from the host's writes.
    let (ok, _, err) = command(&[
        "webhooks",
        "add",
        "--organization",
        "1",
        "--url",
        "https://partner.example/hooks",
    ])
    .await;
    assert!(ok, "{err}");
    sqlx::query("UPDATE media_buys SET budget_ore = 999900 WHERE campaign = 'Campaign 1'")
        .execute(owner.pool())
        .await
        .unwrap();
    // Written from the change's event when a claim stamps it: this call's, or a replica's
    // dispatcher's (the stamping skips a feed another stamper holds, whose transaction then
    // writes the message when it commits), so the message is waited for, not assumed.
    let raised = std::sync::Arc::new(std::sync::Mutex::new(None));
    eventually("the change's webhook message is written", || {
        let (pool, raised) = (owner.pool().clone(), raised.clone());
        async move {
            crate::common::pg::stamp_for_webhooks(&pool).await;
            let message: Option<(String, String, serde_json::Value)> = sqlx::query_as(
                "SELECT organization_id, event_type, order_row FROM partner_webhook_messages",
            )
            .fetch_optional(&pool)
            .await
            .unwrap();
            let found = message.is_some();
            *raised.lock().unwrap() = message;
            found
        }
    })
    .await;
    let raised = raised.lock().unwrap().take().unwrap();
    assert_eq!(
        (raised.0.as_str(), raised.1.as_str()),
        ("1", "order.updated")
    );
    assert_eq!(raised.2["budget_dkk"], json!(9999));

    // The account deleted: its keys are refused on every replica within the caches' bound.
    sqlx::raw_sql("DELETE FROM media_buys WHERE account_id = 1; DELETE FROM accounts WHERE id = 1")
        .execute(owner.pool())
        .await
        .unwrap();
    for (_, base) in &replicas {
        eventually("a deleted account's key is refused", || {
            let (client, base, key) = (client.clone(), base.clone(), key.clone());
            async move {
                let me = fetch(&client, Method::GET, format!("{base}/v1/me"), Some(&key)).await;
                me.status == http::StatusCode::UNAUTHORIZED
            }
        })
        .await;
    }
    // Not a row copied.
    let copied = copied_rows(&owner).await;
    assert_eq!(copied, 0);
}

#[tokio::test]
async fn a_schema_map_file_with_a_misspelt_key_is_refused_before_the_database_is_asked() {
    use crate::common::net::temp_file;
    crate::common::needs::needs!(Examples);
    let map = temp_file(
        "misspelt-schema-map.toml",
        "[orders]\ntable = \"public.media_buys\"\nbudget = \"round(budget_ore / 100)\"\n",
    );
    // A database nobody answers at: the map's error comes first, at once.
    let (ok, _, err) = crate::common::standalone_command(&[
        "--database-url",
        "postgres://nobody@127.0.0.1:1/none",
        "--schema-map",
        map.to_str().unwrap(),
        "migrate",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.contains("--schema-map") && err.contains("unknown field `budget`"),
        "{err}"
    );
}

/// The documented roles, with the host data page's grants: the serving role reads the
/// host's orders and organizations, the key admin issues to a mapped organization; neither
/// writes the host's orders, forges an event, attaches the crate's trigger or registers the
/// map.
#[tokio::test]
async fn the_documented_roles_serve_and_issue_through_the_map_and_can_do_no_more() {
    use partner_api::store::{KeyManager, NewKey};
    crate::common::needs::needs!(Postgres);
    let (owner, url) = host_store().await;
    let [serving, keys, delivering] = pg::create_documented_roles(&url).await;
    let docs = include_str!("../../src/docs/host_data.md");
    let grants = docs
        .split("## 4. Grant the documented roles")
        .nth(1)
        .and_then(|rest| rest.split("```sql").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("the grants of the host data page")
        .replace("partner_api_serving", &serving)
        .replace("partner_api_key_admin", &keys);
    sqlx::raw_sql(&grants).execute(owner.pool()).await.unwrap();
    add_account(
        &owner,
        &Organization {
            id: "acme".into(),
            name: "Acme".into(),
        },
    )
    .await
    .unwrap();
    write_buy(
        &owner,
        "acme",
        &crate::common::order("b1", 1_700_000_000_000),
    )
    .await
    .unwrap();
    let as_role = |role: &str| {
        let store = PgStore::connect_lazy(&pg::as_user(&url, role)).unwrap();
        async move { store.with_schema_map(host_map()).await.unwrap() }
    };
    // The key admin issues to the host's organization, and to no other.
    let admin = as_role(&keys).await;
    let issued = admin
        .issue("acme", NewKey::new(partner_api::key::KeyEnvironment::Test))
        .await;
    let key = issued.expect("the key admin issues to a mapped organization");
    let unknown = admin
        .issue(
            "nobody",
            NewKey::new(partner_api::key::KeyEnvironment::Test),
        )
        .await;
    assert_eq!(
        unknown.unwrap_err().kind(),
        partner_api::StoreErrorKind::NotFound
    );
    // The serving role serves it.
    let serving_store = as_role(&serving).await;
    let api = partner_api::PartnerApi::from_store(serving_store.clone()).with_events(serving_store);
    let me = call(&api, get("/v1/me", Some(key.plaintext()))).await;
    assert_eq!(me.json()["data"]["organization"]["name"], json!("Acme"));
    let page = call(&api, get("/v1/orders", Some(key.plaintext()))).await;
    assert_eq!(page.json()["data"]["orders"][0]["id"], json!("b1"));
    let feed = call(&api, get("/v1/events", Some(key.plaintext()))).await;
    assert_eq!(feed.json()["data"]["events"][0]["data"]["id"], json!("b1"));
    // Through a map without `updated_at`, the recorded last change too (a function that
    // runs as the owner: the role reads no event table itself).
    let recorded = PgStore::connect_lazy(&pg::as_user(&url, &serving))
        .unwrap()
        .with_schema_map(host_map_without_updated_at())
        .await
        .unwrap();
    let page = recorded
        .orders("acme", &partner_api::store::OrderQuery::default())
        .await
        .expect("the serving role reads the recorded last change");
    assert_eq!(page.orders()[0].order().updated_at, None);
    // And no role of them can do more.
    let function: String = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p \
         WHERE p.proname LIKE 'partner\\_api\\_orders\\_media\\_buys\\_%'",
    )
    .fetch_one(owner.pool())
    .await
    .unwrap();
    for role in [&serving, &keys, &delivering] {
        let store = PgStore::connect_lazy(&pg::as_user(&url, role)).unwrap();
        let written = write_buy(&store, "acme", &crate::common::order("forged", 1)).await;
        assert!(written.is_err(), "{role} wrote the host's orders");
        let forged = store
            .pool()
            .execute(
                "INSERT INTO partner_api_order_events (organization_id, change, order_id) \
                 VALUES ('acme', 'order.created', 'forged')",
            )
            .await;
        assert!(forged.is_err(), "{role} forged an event");
        let attached = store
            .pool()
            .execute(
                format!(
                    "CREATE TRIGGER borrowed AFTER INSERT ON media_buys FOR EACH ROW \
                     EXECUTE FUNCTION {function}"
                )
                .as_str(),
            )
            .await;
        assert!(attached.is_err(), "{role} attached the crate's trigger");
        // Nor change the type every snapshot is rendered through (its JSON), nor drop it
        // (every write's snapshot would fail).
        for statement in [
            "ALTER TYPE partner_api_order_snapshot RENAME ATTRIBUTE id TO order_id",
            "DROP TYPE partner_api_order_snapshot",
        ] {
            let refused = store
                .pool()
                .execute(statement)
                .await
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains("must be owner"),
                "{role}: {statement}: {refused}"
            );
        }
        if let Ok(mapped) = store.with_schema_map(host_map()).await {
            assert!(
                mapped.register_schema_map().await.is_err(),
                "{role} registered the map"
            );
        }
    }
    assert_eq!(events_of(&owner, "forged").await, 0);
}

/// Registration under a fault and a burst: a host's transaction holding its table makes a
/// changed map's registration give up after its 2 s lock time-out, saying why, rather than
/// queue the host's writes behind it; replicas registering at once make one trigger.
#[tokio::test]
async fn a_registration_waits_its_lock_time_out_at_most_and_a_burst_makes_one_trigger() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = host_store().await;
    let changed = || {
        let orders = match host_map().orders() {
            Some(orders) => orders.clone(),
            None => unreachable!(),
        };
        SchemaMap::new().with_orders(orders.with(OrderField::Status, "lower(state)"))
    };
    // The host's write in flight holds its table.
    let mut host = store.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO accounts VALUES ('held', 'Held')")
        .execute(&mut *host)
        .await
        .unwrap();
    sqlx::query("LOCK TABLE media_buys IN ROW EXCLUSIVE MODE")
        .execute(&mut *host)
        .await
        .unwrap();
    let replica = PgStore::connect_lazy(&url).unwrap();
    let waiting = replica.with_schema_map(changed()).await.unwrap();
    let refused = waiting.register_schema_map().await.unwrap_err();
    let mut message = refused.to_string();
    if let Some(source) = std::error::Error::source(&refused) {
        message.push_str(&format!(": {source}"));
    }
    assert!(message.contains("lock timeout"), "{message}");
    host.rollback().await.unwrap();
    // Four replicas at once, with the changed map: one trigger, which serves.
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let url = url.clone();
        let map = changed();
        burst.spawn(async move {
            let replica = PgStore::connect_lazy(&url).unwrap();
            let mapped = replica.with_schema_map(map).await.unwrap();
            mapped.register_schema_map().await
        });
    }
    while let Some(registered) = burst.join_next().await {
        registered.unwrap().unwrap();
    }
    let triggers: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'partner_api_orders'")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(triggers, 1);
    add_account(
        &store,
        &Organization {
            id: "acme".into(),
            name: "Acme".into(),
        },
    )
    .await
    .unwrap();
    write_buy(
        &store,
        "acme",
        &crate::common::order("after-burst", 1_700_000_000_000),
    )
    .await
    .unwrap();
    assert_eq!(events_of(&store, "after-burst").await, 1);
}

/// The capture mode on a mapped table: the host's writes (one that changes only a column the
/// map does not read, one the contract cannot show, a move between accounts, a deletion, a
/// transaction of several) get from the log the events the registered trigger writes.
#[tokio::test]
async fn the_capture_reads_the_hosts_table_through_the_map_as_its_trigger_does() {
    crate::common::needs::needs!(Postgres);
    const WRITES: &str = "\
        INSERT INTO media_buys (buy_ref, account_code, channels, advertiser, campaign, budget_ore, \
            starts_on, ends_on, state, po_number, created) VALUES \
            ('b1', 'a1', '{meta}', 'A', 'C', 12345, '2026-03-01', '2026-04-30', 'BOOKED', NULL, \
             '2026-02-01 10:00:00+02'); \
        UPDATE media_buys SET internal_note = 'seen' WHERE buy_ref = 'b1'; \
        UPDATE media_buys SET state = 'LIVE', po_number = 'PO-1' WHERE buy_ref = 'b1'; \
        UPDATE media_buys SET channels = '{google}' WHERE buy_ref = 'b1'; \
        INSERT INTO media_buys (buy_ref, account_code, channels, advertiser, campaign, budget_ore, \
            starts_on, ends_on, state, po_number, created) VALUES \
            ('b2', 'a1', ARRAY['meta', NULL], 'A', 'C', 100, '2026-03-01', '2026-04-30', 'BOOKED', \
             'PO', '2026-02-01 10:00:00Z'); \
        BEGIN; \
        UPDATE media_buys SET account_code = 'a2' WHERE buy_ref = 'b1'; \
        DELETE FROM media_buys WHERE buy_ref = 'b2'; \
        COMMIT; \
        DELETE FROM media_buys WHERE buy_ref = 'b1'";
    let events = |store: PgStore| async move {
        crate::common::pg::stamp_written(store.pool()).await;
        sqlx::query_as::<
            _,
            (
                String,
                String,
                String,
                Option<serde_json::Value>,
                Option<serde_json::Value>,
            ),
        >(
            "SELECT organization_id, change, order_id, order_row, previous_providers \
             FROM partner_api_order_events ORDER BY id",
        )
        .fetch_all(store.pool())
        .await
        .unwrap()
    };
    let mut stores = Vec::new();
    for _ in 0..2 {
        let (store, _) = host_store().await;
        for id in ["a1", "a2"] {
            let account = Organization {
                id: id.into(),
                name: id.into(),
            };
            add_account(&store, &account).await.unwrap();
        }
        stores.push(store);
    }
    let (triggered, captured) = (stores[0].clone(), stores[1].clone());
    sqlx::raw_sql(WRITES)
        .execute(triggered.pool())
        .await
        .unwrap();
    captured.start_order_capture().await.unwrap();
    sqlx::raw_sql(WRITES)
        .execute(captured.pool())
        .await
        .unwrap();
    let reader = captured.order_capture();
    while !reader.round().await.unwrap().caught_up {}
    let want = events(triggered.clone()).await;
    assert_eq!(want.len(), 8, "{want:#?}");
    // The providers before each update and deletion, as the map showed the order (`[]` for
    // the buy it cannot show): what the key's views of the feed are worked out from.
    let previous: Vec<(&str, Option<serde_json::Value>)> = want
        .iter()
        .map(|event| (event.1.as_str(), event.4.clone()))
        .collect();
    let (meta, google) = (json!(["meta"]), json!(["google"]));
    assert_eq!(
        previous,
        [
            ("order.created", None),
            ("order.updated", Some(meta.clone())),
            ("order.updated", Some(meta)),
            ("order.created", None),
            ("order.deleted", Some(google.clone())),
            ("order.created", None),
            ("order.deleted", Some(json!([]))),
            ("order.deleted", Some(google)),
        ]
    );
    assert_eq!(events(captured.clone()).await, want);
    // In the view of meta: the buy created, updated, then gone to google (its id only); the
    // buy the map cannot show is in no view.
    let view = partner_api::store::EventQuery::oldest(100)
        .with_providers(Some(["meta".to_owned()].into()));
    let partner_api::store::EventsPage::Events { events: seen, .. } =
        triggered.events("a1", &view).await.unwrap()
    else {
        panic!("the view of meta was not read")
    };
    let seen: Vec<(&str, String)> = seen
        .iter()
        .map(|event| {
            (
                event.change.as_str(),
                String::from_utf8_lossy(&event.data).into_owned(),
            )
        })
        .collect();
    assert_eq!(seen.len(), 3, "{seen:#?}");
    assert_eq!(
        seen.iter().map(|(change, _)| *change).collect::<Vec<_>>(),
        ["order.created", "order.updated", "order.deleted"]
    );
    assert_eq!(seen[2].1, r#"{"id":"b1"}"#);
    captured
        .stop_order_capture(std::time::Duration::from_secs(10))
        .await
        .unwrap();
}
