//! Keys as a Settings page manages them, seen from the API: issued keys work at once, keys
//! revoked by id or expired answer exactly as unknown ones, a roll's overlap holds, and the
//! last use of a key reaches the store in batches.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use partner_api::key::KeyEnvironment;
use partner_api::last_used::LastUsedRecorder;
use partner_api::store::{KeyManager, NewKey};
use partner_api::{PartnerApi, Timestamp};

#[tokio::test]
async fn an_expired_or_revoked_key_answers_exactly_as_an_unknown_one() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    // Long enough that the key is still valid when first asked about, however slow the
    // machine; waited out below, to the millisecond, before it is asked about again.
    let expires_at = Timestamp::now().saturating_add(Duration::from_secs(2));
    let expiring = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live).with_expires_at(expires_at),
        )
        .await
        .unwrap();
    let revoked = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    for key in [expiring.plaintext(), revoked.plaintext()] {
        assert_eq!(
            call(&api, get("/v1/me", Some(key))).await.status,
            StatusCode::OK
        );
    }
    store.revoke("org_a", &revoked.record().id).await.unwrap();
    let left = expires_at
        .duration_since(Timestamp::now())
        .unwrap_or(Duration::ZERO);
    tokio::time::sleep(left + Duration::from_millis(100)).await;
    let unknown = call(&api, get("/v1/orders", Some("pk_test_never_issued"))).await;
    for key in [expiring.plaintext(), revoked.plaintext()] {
        let refused = call(&api, get("/v1/orders", Some(key))).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert_eq!(refused.body, unknown.body);
        assert_eq!(
            without_request_id(refused.headers),
            without_request_id(unknown.headers.clone())
        );
    }
}

#[tokio::test]
async fn a_rolled_key_and_its_successor_both_work_until_the_overlap_ends() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    let old = store
        .issue("org_b", NewKey::new(KeyEnvironment::Test).with_label("ETL"))
        .await
        .unwrap();
    let new = store
        .roll(
            "org_b",
            &old.record().id,
            partner_api::store::RollKey::new(Duration::from_millis(400)),
        )
        .await
        .unwrap();
    for key in [old.plaintext(), new.plaintext()] {
        let me = call(&api, get("/v1/me", Some(key))).await;
        assert_eq!(me.status, StatusCode::OK);
        assert_eq!(me.json()["data"]["organization"]["id"], "org_b");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        call(&api, get("/v1/me", Some(old.plaintext())))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&api, get("/v1/me", Some(new.plaintext())))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_last_use_of_a_key_reaches_the_store_in_batches() {
    let store = store();
    let recorder =
        LastUsedRecorder::spawn(store.clone()).with_flush_interval(Duration::from_secs(1));
    let api = PartnerApi::from_store(store.clone()).with_last_used(recorder.clone());
    let issued = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let id = issued.record().id.clone();
    let idle = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let before = Timestamp::now();
    for _ in 0..5 {
        assert_eq!(
            call(&api, get("/v1/me", Some(issued.plaintext())))
                .await
                .status,
            StatusCode::OK
        );
    }
    // Not written on the request path...
    assert_eq!(store.get("org_a", &id).await.unwrap().last_used_at, None);
    // ...but by the background task, within its interval (and a tick of its clock).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let last_used = loop {
        if let Some(at) = store.get("org_a", &id).await.unwrap().last_used_at {
            break at;
        }
        assert!(tokio::time::Instant::now() < deadline, "never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let second = Duration::from_secs(1);
    assert!(
        last_used.saturating_add(second) >= before
            && last_used <= Timestamp::now().saturating_add(second),
        "last used {last_used}, requests at {before}"
    );
    assert_eq!(
        store
            .get("org_a", &idle.record().id)
            .await
            .unwrap()
            .last_used_at,
        None
    );
    // A refused key records nothing; an explicit flush writes what is in hand.
    call(&api, get("/v1/me", Some("pk_test_never_issued"))).await;
    call(&api, get("/v1/me", Some(KEY_B))).await;
    assert_eq!(recorder.flush().await.unwrap(), 1);
    let b = store.list("org_b").await.unwrap();
    assert!(b[0].last_used_at.is_some(), "{b:?}");
}

#[tokio::test]
async fn a_full_recorder_drops_new_keys_instead_of_growing_or_waiting() {
    let store = store();
    let recorder = LastUsedRecorder::with_capacity(store.clone(), 2);
    let ids: Vec<Arc<str>> = (0..5).map(|n| Arc::from(format!("key_{n}"))).collect();
    for id in &ids {
        recorder.record(id);
    }
    assert_eq!(recorder.dropped(), 3);
    // Known keys are still recorded when full.
    recorder.record(&ids[0]);
    assert_eq!(recorder.dropped(), 3);
    assert_eq!(
        recorder.flush().await.unwrap(),
        2,
        "the batch holds the first two keys"
    );
}

#[tokio::test]
async fn uses_a_failed_batch_held_are_written_with_the_next_one() {
    use std::sync::atomic::Ordering;
    let store = store();
    let keys = SpyKeys::new(store.clone());
    keys.failing_last_used.store(true, Ordering::SeqCst);
    let failing = keys.failing_last_used.clone();
    let recorder = LastUsedRecorder::spawn(keys);
    let issued = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let id: Arc<str> = Arc::from(issued.record().id.as_str());
    recorder.record(&id);
    assert!(recorder.flush().await.is_err(), "the store is down");
    // Used again meanwhile: the held use and the new one make one entry, none is lost.
    recorder.record(&id);
    assert!(recorder.flush().await.is_err());
    assert_eq!(store.get("org_a", &id).await.unwrap().last_used_at, None);
    failing.store(false, Ordering::SeqCst);
    assert_eq!(
        recorder.flush().await.unwrap(),
        1,
        "one key, its latest use"
    );
    assert!(store
        .get("org_a", &id)
        .await
        .unwrap()
        .last_used_at
        .is_some());
    assert_eq!(recorder.dropped(), 0);
}

/// A key whose expiry came from a seed (or SQL), with no recorded lifetime, rolls into a key
/// that expires after the same span, on both stores: a roll never makes a key immortal.
#[tokio::test]
async fn a_key_with_an_expiry_and_no_recorded_lifetime_rolls_into_one_that_expires() {
    use partner_api::seed::{Seed, SeedKey};
    let mut seed = Seed::demo();
    let span = Duration::from_secs(30 * 24 * 3600);
    seed.api_keys = vec![SeedKey {
        key: "pk_test_seeded_with_an_expiry_0123456789".to_owned(),
        organization_id: "org_demo".to_owned(),
        expires_at: Some(Timestamp::now().saturating_add(span)),
        ..SeedKey::default()
    }];
    let memory = seed.to_memory_store().unwrap();
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut stores: Vec<(&str, Box<dyn KeyManager>)> = vec![("memory", Box::new(memory))];
    #[cfg(feature = "postgres")]
    // The PostgreSQL half: skipped without a server, a failure where every need is required.
    if crate::common::needs::has(&[crate::common::needs::Need::Postgres]) {
        let url = crate::common::pg::fresh_database().await;
        let pg = partner_api::PgStore::connect_lazy(&url).unwrap();
        pg.migrate().await.unwrap();
        pg.load_seed(&seed).await.unwrap();
        stores.push(("postgres", Box::new(pg)));
    }
    for (name, store) in stores {
        let old = store.list("org_demo").await.unwrap().remove(0);
        assert!(
            old.expires_at.is_some(),
            "{name}: the seed's expiry was lost"
        );
        let rolled = store
            .roll(
                "org_demo",
                &old.id,
                partner_api::store::RollKey::new(Duration::ZERO),
            )
            .await
            .unwrap();
        let expires_at = rolled
            .record()
            .expires_at
            .unwrap_or_else(|| panic!("{name}: the rolled key never expires"));
        let lifetime = expires_at.duration_since(Timestamp::now()).unwrap();
        assert!(
            lifetime > span - Duration::from_secs(60) && lifetime <= span + Duration::from_secs(60),
            "{name}: {lifetime:?}"
        );
    }
}
