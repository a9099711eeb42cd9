//! The conformance suites check what they claim: the shipped stores pass, and a store or a
//! limiter with a deliberate fault fails exactly the checks its fault breaks.
#![cfg(feature = "testing")]

use async_trait::async_trait;
use partner_api::store::{
    AuditLog, AuditQuery, AuditRecord, EventFeed, EventQuery, EventsPage, KeyUsageTotal,
    OrderQuery, UsageBucket, UsageCount, UsageGranularity, UsagePeriod, UsageStore,
};
use partner_api::store::{DeprecatedCallCount, DeprecatedCallStore, DeprecatedCallTotal};
use partner_api::store::{IssuedKey, KeyManager, KeyPolicy, KeyRecord, KeyUse, NewKey, RollKey};
use partner_api::testing::{run, StoreFixtures};
use partner_api::{
    EncodedOrder, KeyDigest, KeyLookup, KeyStore, MemoryStore, Order, OrderPage, OrderStore,
    Organization, StoreError, StoreErrorKind, Timestamp,
};
use std::time::Duration;

#[tokio::test]
async fn the_memory_store_conforms_and_can_run_twice() {
    let store = MemoryStore::new();
    let report = run(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 15);
    run(&store).await.assert_passed();
}

/// How a [`Faulty`] store breaks the contract.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// Revocations are dropped and the limit is ignored.
    ForgetsRevocationsAndLimits,
    /// `lookup_now` resolves no key, while `lookup` does.
    ForgetsKeysAtOnce,
    /// Every page starts from the newest order, whatever its position.
    IgnoresPositions,
    /// Pages hold every order, whatever the filter.
    IgnoresFilters,
    /// Valid keys resolve without their expiry.
    DropsExpiry,
    /// Rolls drop the lifetime asked for, and key policies are never kept.
    IgnoresKeyPolicy,
    /// Allowed address ranges are recorded but never reach a lookup.
    ForgetsAllowedIps,
    /// Usage reads of another organization's key answer "no usage" instead of NotFound,
    /// and retention deletes everything at once.
    LeaksUsage,
    /// Revocations run where the caller's audit context does not reach.
    ForgetsAuditContext,
    /// The events feed drops the second event of every answer.
    SkipsEvents,
    /// The events feed answers each page newest first.
    ReordersEvents,
    /// Reads of one key's deprecated calls answer every key's of its organization.
    IgnoresDeprecatedCallsKey,
    /// Orders are served as never changed: `updatedAt` is always their creation.
    ForgetsChangeTimes,
    /// A change of a key's providers is recorded but never reaches a lookup.
    ForgetsProviders,
    /// The feed in a view of providers is the whole feed's page filtered after the fact, by
    /// the providers of each event's order after the change.
    FiltersViewsAfterTheFact,
    /// The feed's revision is the same whatever is written.
    KeepsItsRevision,
}

/// A memory store with one deliberate fault.
struct Faulty(MemoryStore, Fault);

#[async_trait]
impl KeyStore for Faulty {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        let found = self.0.lookup(digest).await?;
        Ok(match (self.1, found) {
            (Fault::DropsExpiry, KeyLookup::Valid(principal)) => {
                KeyLookup::Valid(principal.with_expires_at(None))
            }
            (_, found) => found,
        })
    }
    fn lookup_now(&self, _: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        (self.1 == Fault::ForgetsKeysAtOnce).then_some(Ok(KeyLookup::Unknown))
    }
}

#[async_trait]
impl OrderStore for Faulty {
    async fn orders(&self, org: &str, query: &OrderQuery) -> Result<OrderPage, StoreError> {
        let query = match self.1 {
            Fault::ForgetsRevocationsAndLimits => {
                OrderQuery::newest(usize::MAX).with_filter(query.filter().clone())
            }
            Fault::IgnoresPositions => {
                OrderQuery::newest(query.limit()).with_filter(query.filter().clone())
            }
            Fault::IgnoresFilters => match query.position() {
                Some(position) => OrderQuery::after(position.clone(), query.limit()),
                None => OrderQuery::newest(query.limit()),
            },
            _ => query.clone(),
        };
        let page = self.0.orders(org, &query).await?;
        if self.1 != Fault::ForgetsChangeTimes {
            return Ok(page);
        }
        let forgotten = page
            .orders()
            .iter()
            .map(|order| {
                EncodedOrder::new(Order {
                    updated_at: None,
                    ..order.order().clone()
                })
                .unwrap()
            })
            .collect();
        Ok(OrderPage::new(forgotten).with_more(page.has_more()))
    }
}

#[async_trait]
impl EventFeed for Faulty {
    async fn events(&self, org: &str, query: &EventQuery) -> Result<EventsPage, StoreError> {
        let view: Option<Vec<String>> = query.providers().map(<[String]>::to_vec);
        let page = match self.1 {
            Fault::FiltersViewsAfterTheFact => {
                self.0
                    .events(org, &query.clone().with_providers(None))
                    .await?
            }
            _ => self.0.events(org, query).await?,
        };
        let EventsPage::Events {
            mut events,
            through,
        } = page
        else {
            return Ok(page);
        };
        match self.1 {
            Fault::FiltersViewsAfterTheFact => {
                if let Some(view) = view {
                    events.retain(|event| {
                        let data: serde_json::Value = serde_json::from_slice(&event.data).unwrap();
                        data["providers"].as_array().is_some_and(|providers| {
                            providers
                                .iter()
                                .any(|provider| view.iter().any(|p| provider == p.as_str()))
                        })
                    });
                }
            }
            Fault::SkipsEvents if events.len() > 1 => {
                events.remove(1);
            }
            Fault::ReordersEvents => events.reverse(),
            _ => {}
        }
        Ok(EventsPage::Events { events, through })
    }
    fn serves_provider_views(&self) -> bool {
        self.0.serves_provider_views()
    }
    fn revision_now(&self, org: &str) -> Option<u64> {
        match self.1 {
            Fault::KeepsItsRevision => Some(1),
            _ => self.0.revision_now(org),
        }
    }
    async fn prune_events(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        self.0.prune_events(older_than, batch).await
    }
}

#[tokio::test]
async fn the_memory_feed_passes_the_suite_and_feeds_that_skip_reorder_filter_after_or_keep_their_revision_fail_it(
) {
    let store = MemoryStore::new();
    for _ in 0..2 {
        let report = partner_api::testing::run_event_feed(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 6);
    }
    let report =
        partner_api::testing::run_event_feed(&Faulty(MemoryStore::new(), Fault::KeepsItsRevision))
            .await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(failed, ["rule feed-revision: after each write that makes an event, the feed's revision is one it never was"], "{report}");
    let report = partner_api::testing::run_event_feed(&Faulty(
        MemoryStore::new(),
        Fault::FiltersViewsAfterTheFact,
    ))
    .await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(failed, ["rule feed-in-view: a view of providers holds the events of its orders, an order coming in created and one leaving deleted, by page and type"], "{report}");
    for fault in [Fault::SkipsEvents, Fault::ReordersEvents] {
        let report = partner_api::testing::run_event_feed(&Faulty(MemoryStore::new(), fault)).await;
        let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
        for rule in [
            "rule feed-exactly-once: every change",
            "rule feed-exactly-once: resuming",
        ] {
            assert!(
                failed.iter().any(|name| name.starts_with(rule)),
                "{rule}: {report}"
            );
        }
    }
}

#[async_trait]
impl AuditLog for Faulty {
    async fn audit_entries(
        &self,
        org: &str,
        query: &AuditQuery,
    ) -> Result<partner_api::store::AuditPage, StoreError> {
        self.0.audit_entries(org, query).await
    }
    async fn append(&self, record: AuditRecord) -> Result<(), StoreError> {
        self.0.append(record).await
    }
    async fn prune_audit(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        self.0.prune_audit(older_than, batch).await
    }
}

#[async_trait]
impl UsageStore for Faulty {
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError> {
        self.0.record_usage(counts).await
    }
    async fn key_usage(
        &self,
        org: &str,
        key_id: &str,
        period: UsagePeriod,
        granularity: UsageGranularity,
    ) -> Result<Vec<UsageBucket>, StoreError> {
        let read = self.0.key_usage(org, key_id, period, granularity).await;
        match (self.1, read) {
            // The fault: a key of another organization reads as a key without usage.
            (Fault::LeaksUsage, Err(err)) if err.kind() == StoreErrorKind::NotFound => {
                Ok(Vec::new())
            }
            (_, read) => read,
        }
    }
    async fn usage_totals(
        &self,
        org: &str,
        period: UsagePeriod,
    ) -> Result<Vec<KeyUsageTotal>, StoreError> {
        self.0.usage_totals(org, period).await
    }
    async fn prune_usage(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let batch = match self.1 {
            Fault::LeaksUsage => u32::MAX,
            _ => batch,
        };
        self.0.prune_usage(older_than, batch).await
    }
}

#[async_trait]
impl DeprecatedCallStore for Faulty {
    async fn record_deprecated_calls(
        &self,
        counts: &[DeprecatedCallCount],
    ) -> Result<(), StoreError> {
        self.0.record_deprecated_calls(counts).await
    }
    async fn deprecated_calls(
        &self,
        org: &str,
        key_id: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<DeprecatedCallTotal>, StoreError> {
        let key_id = key_id.filter(|_| self.1 != Fault::IgnoresDeprecatedCallsKey);
        self.0.deprecated_calls(org, key_id, since).await
    }
    async fn prune_deprecated_calls(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<u64, StoreError> {
        self.0.prune_deprecated_calls(older_than, batch).await
    }
}

#[async_trait]
impl StoreFixtures for Faulty {
    type Store = Self;
    type Orders = Self;
    fn store(&self) -> &Self {
        self
    }
    fn order_store(&self) -> &Self {
        self
    }
    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        self.0.add_organization(organization.clone())
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
        if self.1 != Fault::ForgetsRevocationsAndLimits {
            self.0.revoke_key(key);
        }
        Ok(())
    }
    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        self.0.add_orders(organization_id, orders.iter().cloned())
    }
    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError> {
        self.0.remove_order(organization_id, order_id);
        Ok(())
    }
    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError> {
        self.0.update_order(organization_id, order.clone())
    }
}

#[async_trait]
impl KeyManager for Faulty {
    fn supports(&self, ability: partner_api::store::KeyAbility) -> bool {
        self.0.supports(ability)
    }
    async fn issue(&self, org: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        self.0.issue(org, new).await
    }
    async fn list(&self, org: &str) -> Result<Vec<KeyRecord>, StoreError> {
        self.0.list(org).await
    }
    async fn get(&self, org: &str, id: &str) -> Result<KeyRecord, StoreError> {
        self.0.get(org, id).await
    }
    async fn revoke(&self, org: &str, id: &str) -> Result<KeyRecord, StoreError> {
        if self.1 == Fault::ForgetsAuditContext {
            // On a task of its own: the caller's audit context stays behind.
            let (store, org, id) = (self.0.clone(), org.to_owned(), id.to_owned());
            return tokio::spawn(async move { store.revoke(&org, &id).await })
                .await
                .map_err(StoreError::other)?;
        }
        self.0.revoke(org, id).await
    }
    async fn restrict(
        &self,
        org: &str,
        id: &str,
        allowed_ips: partner_api::key::AllowedIps,
    ) -> Result<KeyRecord, StoreError> {
        match self.1 {
            // Records the ranges, but lookups keep answering the key as unrestricted.
            Fault::ForgetsAllowedIps => self.0.get(org, id).await.map(|mut record| {
                record.allowed_ips = allowed_ips;
                record
            }),
            _ => self.0.restrict(org, id, allowed_ips).await,
        }
    }
    async fn revoke_leaked(
        &self,
        reports: &[partner_api::store::LeakReport],
    ) -> Result<Vec<Option<partner_api::store::LeakedKey>>, StoreError> {
        self.0.revoke_leaked(reports).await
    }
    async fn roll(&self, org: &str, id: &str, roll: RollKey) -> Result<IssuedKey, StoreError> {
        let roll = match self.1 {
            Fault::IgnoresKeyPolicy => RollKey::new(roll.overlap()),
            _ => roll,
        };
        self.0.roll(org, id, roll).await
    }
    async fn key_policy(&self, org: &str) -> Result<KeyPolicy, StoreError> {
        self.0.key_policy(org).await
    }
    async fn set_permissions(
        &self,
        org: &str,
        id: &str,
        permissions: partner_api::key::Permissions,
    ) -> Result<KeyRecord, StoreError> {
        self.0.set_permissions(org, id, permissions).await
    }
    async fn set_providers(
        &self,
        org: &str,
        id: &str,
        providers: Option<Vec<String>>,
    ) -> Result<KeyRecord, StoreError> {
        match self.1 {
            Fault::ForgetsProviders => self.0.get(org, id).await.map(|mut record| {
                record.providers = providers;
                record
            }),
            _ => self.0.set_providers(org, id, providers).await,
        }
    }
    async fn set_key_policy(&self, org: &str, policy: KeyPolicy) -> Result<KeyPolicy, StoreError> {
        match self.1 {
            Fault::IgnoresKeyPolicy => Ok(policy),
            _ => self.0.set_key_policy(org, policy).await,
        }
    }
    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        self.0.record_last_used(uses).await
    }
}

#[tokio::test]
async fn a_key_manager_that_ignores_the_policy_fails_the_policy_checks() {
    let faulty = Faulty(MemoryStore::new(), Fault::IgnoresKeyPolicy);
    let report = partner_api::testing::run_key_manager(&faulty).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        ["a roll never revives an expired key, and passes on the lifetime or takes the one given"],
        "{report}"
    );
    let report = partner_api::testing::run_key_policy(&faulty).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        ["an organization's maximum lifetime and cap on active keys hold for issue and roll"],
        "{report}"
    );
}

#[tokio::test]
async fn a_key_manager_whose_lookups_miss_new_providers_fails_the_restrictions_check() {
    let report = partner_api::testing::run_restrictions(&Faulty(
        MemoryStore::new(),
        Fault::ForgetsProviders,
    ))
    .await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        ["each key's permissions and providers hold on issue, lookup, change and roll"],
        "{report}"
    );
    let report = partner_api::testing::run_restrictions(&Faulty(
        MemoryStore::new(),
        Fault::ForgetsChangeTimes,
    ))
    .await;
    report.assert_passed();
}

#[tokio::test]
async fn a_key_manager_whose_lookups_miss_new_ranges_fails_that_check() {
    let report = partner_api::testing::run_key_manager(&Faulty(
        MemoryStore::new(),
        Fault::ForgetsAllowedIps,
    ))
    .await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        ["a key's allowed address ranges are kept, seen by the next lookup and passed on by a roll"],
        "{report}"
    );
}

/// The names of the checks a store with `fault` fails.
async fn failures(fault: Fault) -> Vec<&'static str> {
    let report = run(&Faulty(MemoryStore::new(), fault)).await;
    println!("{report}");
    report.failures().map(|(name, _)| name).collect()
}

#[tokio::test]
async fn immediate_answers_must_agree_with_waited_ones() {
    let report = run(&Faulty(MemoryStore::new(), Fault::ForgetsKeysAtOnce)).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert!(
        failed.contains(&"a key resolves to its own organization"),
        "{report}"
    );
    assert!(
        failed.contains(&"a revoked key resolves to nothing at once"),
        "{report}"
    );
}

#[tokio::test]
async fn a_broken_store_fails_the_checks_it_breaks() {
    assert_eq!(
        failures(Fault::ForgetsRevocationsAndLimits).await,
        [
            "a revoked key resolves to nothing at once",
            "the limit is honoured",
            "more than 100 orders give the newest 100",
            "pages hold every order once, newest first, across ties",
            "new and deleted orders never shift later pages",
            "10,000 orders in pages of 100",
            "rule filters-hold: filtered pages hold exactly the orders the filter holds",
            "rule last-change: updatedAt is each order's last change, and its filters hold",
        ]
    );
    assert_eq!(
        failures(Fault::IgnoresPositions).await,
        [
            "pages hold every order once, newest first, across ties",
            "new and deleted orders never shift later pages",
            "10,000 orders in pages of 100",
            "rule filters-hold: filtered pages hold exactly the orders the filter holds",
            "rule last-change: updatedAt is each order's last change, and its filters hold",
        ]
    );
    assert_eq!(
        failures(Fault::IgnoresFilters).await,
        [
            "rule filters-hold: filtered pages hold exactly the orders the filter holds",
            "rule last-change: updatedAt is each order's last change, and its filters hold",
        ]
    );
    assert_eq!(
        failures(Fault::ForgetsChangeTimes).await,
        ["rule last-change: updatedAt is each order's last change, and its filters hold"]
    );
    assert_eq!(
        failures(Fault::DropsExpiry).await,
        ["a key's expiry is reported and enforced"]
    );
}

#[tokio::test]
async fn the_memory_store_manages_keys_as_the_suite_requires() {
    let store = MemoryStore::new();
    let report = partner_api::testing::run_key_manager(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 11);
    crate::common::key_abilities_pass(&store).await;
}

#[tokio::test]
async fn the_memory_store_keeps_usage_as_the_suite_requires_and_a_leaky_one_fails() {
    let store = MemoryStore::new();
    for _ in 0..2 {
        let report = partner_api::testing::run_usage(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 4);
    }
    let report =
        partner_api::testing::run_usage(&Faulty(MemoryStore::new(), Fault::LeaksUsage)).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        [
            "reads are scoped to the organization; unknown keys' counts are dropped",
            "retention deletes the oldest counts first, at most a batch at a time",
        ],
        "{report}"
    );
}

#[tokio::test]
async fn the_memory_store_counts_deprecated_calls_as_the_suite_requires_and_a_leaky_one_fails() {
    let store = MemoryStore::new();
    for _ in 0..2 {
        let report = partner_api::testing::run_deprecated_calls(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 3);
    }
    let faulty = Faulty(MemoryStore::new(), Fault::IgnoresDeprecatedCallsKey);
    let report = partner_api::testing::run_deprecated_calls(&faulty).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        ["reads are scoped to the organization and to the key asked for, from the day of since; \
          unknown keys' counts are dropped"],
        "{report}"
    );
}

#[tokio::test]
async fn the_memory_store_keeps_its_audit_log_as_the_suite_requires_and_a_forgetful_one_fails() {
    let store = MemoryStore::new();
    for _ in 0..2 {
        let report = partner_api::testing::run_audit_log(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 5);
    }
    let forgetful = Faulty(MemoryStore::new(), Fault::ForgetsAuditContext);
    let report = partner_api::testing::run_audit_log(&forgetful).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        ["rule audit-in-the-change: each change of a key is logged once, with the caller's context"],
        "{report}"
    );
}

/// The webhooks suite passes on the memory store and bites a store whose finishes ignore
/// which attempt is current.
#[cfg(feature = "webhooks")]
mod webhooks {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use partner_api::testing::{run_webhooks, StoreFixtures};
    use partner_api::webhooks::{
        Attempt, Backlog, ClaimRequest, CreatedEndpoint, Delivery, Endpoint, Finish,
        FinishedAttempt, NewEndpoint, WebhookAbility, WebhookManager, WebhookOutbox,
    };
    use partner_api::{MemoryStore, Order, Organization, StoreError, Timestamp};

    /// Finishes every attempt as if it were the latest claimed one: a late finisher wins.
    struct FaultyOutbox {
        store: MemoryStore,
        latest: Mutex<HashMap<String, u32>>,
        fault: OutboxFault,
    }

    #[derive(Clone, Copy, PartialEq)]
    enum OutboxFault {
        /// A finish of an earlier attempt overwrites a later one's.
        LateFinishWins,
        /// Claims ignore the worker's slots: no equal parts.
        IgnoresSlots,
        /// Endpoints are added at the newest version whatever they ask.
        IgnoresVersions,
        /// A pin is answered as done, but deliveries keep the endpoint's old version.
        PinsWithoutRendering,
    }

    #[async_trait]
    impl WebhookOutbox for FaultyOutbox {
        async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError> {
            let mut request = request.clone();
            if self.fault == OutboxFault::IgnoresSlots {
                request.slots = usize::MAX;
            }
            let claimed = self.store.claim(&request).await?;
            let mut latest = self.latest.lock().unwrap();
            for delivery in &claimed {
                latest.insert(delivery.delivery_id.clone(), delivery.attempt);
            }
            Ok(claimed)
        }
        async fn finish(
            &self,
            delivery: &Delivery,
            attempt: &FinishedAttempt,
        ) -> Result<Finish, StoreError> {
            let mut current = delivery.clone();
            if self.fault == OutboxFault::LateFinishWins {
                if let Some(latest) = self.latest.lock().unwrap().get(&delivery.delivery_id) {
                    current.attempt = *latest;
                }
            }
            self.store.finish(&current, attempt).await
        }
        async fn backlog(&self) -> Result<Backlog, StoreError> {
            self.store.backlog().await
        }
        async fn prune(
            &self,
            older_than: std::time::Duration,
            batch: usize,
        ) -> Result<u64, StoreError> {
            self.store.prune(older_than, batch).await
        }
    }

    #[async_trait]
    impl WebhookManager for FaultyOutbox {
        async fn add_endpoint(
            &self,
            org: &str,
            new: NewEndpoint,
        ) -> Result<CreatedEndpoint, StoreError> {
            let new = if self.fault == OutboxFault::IgnoresVersions {
                new.with_api_version(partner_api::versions::NEWEST)
            } else {
                new
            };
            self.store.add_endpoint(org, new).await
        }
        fn supports(&self, ability: WebhookAbility) -> bool {
            self.fault == OutboxFault::PinsWithoutRendering
                && ability == WebhookAbility::ApiVersions
        }
        async fn pin_api_version(
            &self,
            org: &str,
            id: &str,
            version: partner_api::versions::ApiVersion,
        ) -> Result<Endpoint, StoreError> {
            let mut endpoint = self.store.endpoint(org, id).await?;
            endpoint.api_version = Some(version);
            Ok(endpoint)
        }
        async fn endpoints(&self, org: &str) -> Result<Vec<Endpoint>, StoreError> {
            self.store.endpoints(org).await
        }
        async fn endpoint(&self, org: &str, id: &str) -> Result<Endpoint, StoreError> {
            self.store.endpoint(org, id).await
        }
        async fn rotate_secret(
            &self,
            org: &str,
            id: &str,
            overlap: Duration,
        ) -> Result<CreatedEndpoint, StoreError> {
            self.store.rotate_secret(org, id, overlap).await
        }
        async fn set_enabled(
            &self,
            org: &str,
            id: &str,
            enabled: bool,
        ) -> Result<Endpoint, StoreError> {
            self.store.set_enabled(org, id, enabled).await
        }
        async fn remove_endpoint(&self, org: &str, id: &str) -> Result<(), StoreError> {
            self.store.remove_endpoint(org, id).await
        }
        async fn send_test(&self, org: &str, id: &str) -> Result<String, StoreError> {
            self.store.send_test(org, id).await
        }
        async fn attempts(
            &self,
            org: &str,
            id: &str,
            limit: usize,
        ) -> Result<Vec<Attempt>, StoreError> {
            self.store.attempts(org, id, limit).await
        }
        async fn retry_message(
            &self,
            org: &str,
            id: &str,
            message: &str,
        ) -> Result<(), StoreError> {
            self.store.retry_message(org, id, message).await
        }
        async fn recover(&self, org: &str, id: &str, since: Timestamp) -> Result<u64, StoreError> {
            self.store.recover(org, id, since).await
        }
    }

    #[async_trait]
    impl partner_api::KeyStore for FaultyOutbox {
        async fn lookup(
            &self,
            digest: &partner_api::KeyDigest,
        ) -> Result<partner_api::KeyLookup, StoreError> {
            self.store.lookup(digest).await
        }
    }

    #[async_trait]
    impl partner_api::OrderStore for FaultyOutbox {
        async fn orders(
            &self,
            org: &str,
            query: &partner_api::store::OrderQuery,
        ) -> Result<partner_api::OrderPage, StoreError> {
            self.store.orders(org, query).await
        }
    }

    #[async_trait]
    impl StoreFixtures for FaultyOutbox {
        type Store = Self;
        type Orders = Self;
        fn store(&self) -> &Self {
            self
        }
        fn order_store(&self) -> &Self {
            self
        }
        async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
            self.store.add_organization(organization.clone())
        }
        async fn add_key(
            &self,
            key: &str,
            org: &str,
            expires_at: Option<Timestamp>,
        ) -> Result<(), StoreError> {
            StoreFixtures::add_key(&self.store, key, org, expires_at).await
        }
        async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
            StoreFixtures::revoke_key(&self.store, key).await
        }
        async fn add_orders(&self, org: &str, orders: &[Order]) -> Result<(), StoreError> {
            StoreFixtures::add_orders(&self.store, org, orders).await
        }
        async fn remove_order(&self, org: &str, id: &str) -> Result<(), StoreError> {
            StoreFixtures::remove_order(&self.store, org, id).await
        }
        async fn update_order(&self, org: &str, order: &Order) -> Result<(), StoreError> {
            StoreFixtures::update_order(&self.store, org, order).await
        }
    }

    #[tokio::test]
    async fn the_suite_fails_a_store_whose_late_finishes_win_ignores_the_slots_or_versions() {
        run_webhooks(&MemoryStore::new()).await.assert_passed();
        for (fault, check) in [
            (
                OutboxFault::LateFinishWins,
                "webhooks: leases and current attempts",
            ),
            (
                OutboxFault::IgnoresSlots,
                "webhooks: a claim shares the slots in equal parts",
            ),
            (
                OutboxFault::IgnoresVersions,
                "webhooks: bodies at each endpoint's API version",
            ),
            (
                OutboxFault::PinsWithoutRendering,
                "webhooks: bodies at each endpoint's API version",
            ),
        ] {
            let faulty = FaultyOutbox {
                store: MemoryStore::new(),
                latest: Mutex::default(),
                fault,
            };
            let report = run_webhooks(&faulty).await;
            let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
            assert_eq!(failed, [check], "{report}");
        }
    }
}
