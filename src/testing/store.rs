//! The conformance suite for stores: [`run`].

use chrono::NaiveDate;

use super::calls::{
    add_orders, expected, ids, key, lookup, lookup_outcome, order, organization, read,
};
use super::report::{ensure, failed, Check, Report};
use super::{filters, namespace, pages, StoreFixtures};
use crate::model::{Order, MAX_BUDGET_DKK};
use crate::store::KeyLookup;

/// Runs every check against the store of `fixtures`.
pub async fn run<F: StoreFixtures>(fixtures: &F) -> Report {
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "an unknown key resolves to nothing",
        unknown_key(fixtures).await,
    );
    record(
        "a key resolves to its own organization",
        key_resolves(fixtures).await,
    );
    record(
        "a revoked key resolves to nothing at once",
        revoked_key(fixtures).await,
    );
    record(
        "orders read back exactly as written",
        round_trip(fixtures).await,
    );
    record(
        "newest first, ties by id descending in byte order",
        newest_first(fixtures).await,
    );
    record("the limit is honoured", limit(fixtures).await);
    record(
        "more than 100 orders give the newest 100",
        over_100(fixtures).await,
    );
    record(
        "no orders, or an unknown organization, give none",
        no_orders(fixtures).await,
    );
    record(
        "organizations see only their own orders",
        isolation(fixtures).await,
    );
    record(
        "pages hold every order once, newest first, across ties",
        pages::pages_cover_every_order_once(fixtures).await,
    );
    record(
        "new and deleted orders never shift later pages",
        pages::pages_hold_across_changes(fixtures).await,
    );
    record(
        "10,000 orders in pages of 100",
        pages::ten_thousand_orders(fixtures).await,
    );
    record(
        "rule filters-hold: filtered pages hold exactly the orders the filter holds",
        filters::filters_hold(fixtures).await,
    );
    record(
        "rule last-change: updatedAt is each order's last change, and its filters hold",
        filters::last_change(fixtures).await,
    );
    record(
        "a key's expiry is reported and enforced",
        pages::expiry_is_reported(fixtures).await,
    );
    report
}

/// Checks that the store's newest `limit` orders of `organization_id` are those of `written`
/// that it must return, in the order it must return them.
async fn expect_newest<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    written: &[Order],
    limit: usize,
) -> Check {
    let read = read(fixtures, organization_id, limit).await?;
    let want = expected(written, limit);
    ensure!(
        ids(&read) == ids(&want),
        "{organization_id}, limit {limit}: read {:?}, want {:?}",
        ids(&read),
        ids(&want)
    );
    Ok(())
}

async fn unknown_key<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    key(fixtures, &ns, "known", &org.id).await?;
    let found = lookup_outcome(fixtures, &format!("pk_test_{ns}_never_issued")).await?;
    ensure!(
        found == KeyLookup::Unknown,
        "an unknown key is {found:?}, not unknown"
    );
    Ok(())
}

async fn key_resolves<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let a = organization(fixtures, &ns, "a").await?;
    let b = organization(fixtures, &ns, "b").await?;
    let key_a = key(fixtures, &ns, "a", &a.id).await?;
    let key_a2 = key(fixtures, &ns, "a2", &a.id).await?;
    let key_b = key(fixtures, &ns, "b", &b.id).await?;
    let mut key_ids = Vec::new();
    for (key, organization) in [(&key_a, &a), (&key_a2, &a), (&key_b, &b)] {
        let principal = lookup(fixtures, key)
            .await?
            .ok_or_else(|| format!("the key of {} resolved to nothing", organization.id))?;
        ensure!(
            *principal.organization == *organization,
            "a key of {organization:?} resolved to {:?}",
            principal.organization
        );
        ensure!(!principal.key_id.is_empty(), "the key id is empty");
        ensure!(
            !principal.key_id.contains(key.as_str()),
            "the key id holds the key"
        );
        key_ids.push(principal.key_id.to_string());
    }
    key_ids.sort();
    key_ids.dedup();
    ensure!(key_ids.len() == 3, "three keys share key ids: {key_ids:?}");
    Ok(())
}

async fn revoked_key<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let revoked = key(fixtures, &ns, "revoked", &org.id).await?;
    let kept = key(fixtures, &ns, "kept", &org.id).await?;
    let before = lookup(fixtures, &revoked).await?;
    ensure!(
        before.is_some(),
        "the key did not resolve before revocation"
    );
    fixtures
        .revoke_key(&revoked)
        .await
        .map_err(failed("revoke_key"))?;
    let after = lookup_outcome(fixtures, &revoked).await?;
    ensure!(
        matches!(after, KeyLookup::Revoked { .. } | KeyLookup::Unknown),
        "the revoked key is {after:?}, not revoked (or unknown)"
    );
    let other = lookup(fixtures, &kept).await?;
    ensure!(
        other.is_some(),
        "revoking one key revoked another of the organization"
    );
    Ok(())
}

async fn round_trip<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let mut unusual = order(format!("{ns}-unusual"), 1);
    unusual.providers = vec![];
    unusual.advertiser_name = "Bølge & \"Søn\" \\ 日本 \u{1F600}".into();
    unusual.campaign_name = String::new();
    unusual.budget_dkk = MAX_BUDGET_DKK;
    unusual.start_date = NaiveDate::from_ymd_opt(2026, 2, 28).unwrap_or_default();
    unusual.end_date = NaiveDate::from_ymd_opt(2028, 2, 29).unwrap_or_default();
    unusual.created_at = "2026-03-01T08:00:00.999Z"
        .parse()
        .map_err(|err| format!("{err}"))?;
    let mut zero = order(format!("{ns}-zero"), 2);
    zero.budget_dkk = 0;
    zero.providers = vec!["c".into(), "a".into(), "b".into()];
    let written = vec![unusual, zero];
    add_orders(fixtures, &org.id, &written).await?;
    let read = read(fixtures, &org.id, 100).await?;
    let want = expected(&written, 100);
    ensure!(read == want, "wrote {want:#?}\nread {read:#?}");
    Ok(())
}

async fn newest_first<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    // Equal timestamps; ids whose byte order differs from case-insensitive, numeric and
    // locale-aware orders.
    let mut orders: Vec<Order> = ["a", "B", "b", "aa", "Z", "10", "9", "é"]
        .into_iter()
        .map(|suffix| order(format!("{ns}-{suffix}"), 5_000))
        .collect();
    orders.push(order(format!("{ns}-older"), 4_999));
    orders.push(order(format!("{ns}-newer"), 5_001));
    add_orders(fixtures, &org.id, &orders).await?;
    expect_newest(fixtures, &org.id, &orders, 100).await
}

async fn limit<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let orders: Vec<Order> = (0..10)
        .map(|n| order(format!("{ns}-{n}"), n * 1_000))
        .collect();
    add_orders(fixtures, &org.id, &orders).await?;
    for limit in [0, 1, 3, 10, 11] {
        expect_newest(fixtures, &org.id, &orders, limit).await?;
    }
    Ok(())
}

async fn over_100<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    // 157 orders, one second apart, written in a scrambled order.
    let orders: Vec<Order> = (0..157_i64)
        .map(|n| (n * 61) % 157)
        .map(|n| order(format!("{ns}-{n:03}"), n * 1_000))
        .collect();
    add_orders(fixtures, &org.id, &orders).await?;
    let read = read(fixtures, &org.id, 100).await?;
    ensure!(read.len() == 100, "read {} orders", read.len());
    expect_newest(fixtures, &org.id, &orders, 100).await
}

async fn no_orders<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let read = read(fixtures, &org.id, 100).await?;
    ensure!(
        read.is_empty(),
        "an organization without orders has {:?}",
        ids(&read)
    );
    let read = read_unknown(fixtures, &ns).await?;
    ensure!(
        read.is_empty(),
        "an unknown organization has {:?}",
        ids(&read)
    );
    Ok(())
}

async fn read_unknown<F: StoreFixtures>(fixtures: &F, ns: &str) -> Result<Vec<Order>, String> {
    read(fixtures, &format!("{ns}_no_such_organization"), 100).await
}

async fn isolation<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let a = organization(fixtures, &ns, "a").await?;
    let b = organization(fixtures, &ns, "b").await?;
    // Interleaved in time, so any query that forgets the organization mixes them.
    let of_a: Vec<Order> = (0..30)
        .map(|n| order(format!("{ns}-a{n}"), n * 2_000))
        .collect();
    let of_b: Vec<Order> = (0..30)
        .map(|n| order(format!("{ns}-b{n}"), n * 2_000 + 1_000))
        .collect();
    add_orders(fixtures, &a.id, &of_a).await?;
    add_orders(fixtures, &b.id, &of_b).await?;
    expect_newest(fixtures, &a.id, &of_a, 100).await?;
    expect_newest(fixtures, &b.id, &of_b, 100).await
}
