//! The conformance suite of [`UsageStore`]: counts add up, reads are scoped and bucketed,
//! retention deletes the oldest first in batches.

use std::time::Duration;

use super::calls::{key, lookup, organization};
use super::report::{ensure, failed, kind_of, Check, Report};
use super::{namespace, StoreFixtures};
use crate::model::Timestamp;
use crate::store::StoreErrorKind;
use crate::store::{
    UsageCount, UsageGranularity, UsageOutcome, UsagePeriod, UsageRoute, UsageStore,
};

/// Runs the checks of a [`UsageStore`] against the store of `fixtures`. Each check uses
/// organizations and keys of its own, and hours long past (2001 and 2026-01), so it runs
/// against a store that holds other data; the retention check deletes only counts of hours
/// before 2002.
pub async fn run_usage<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: UsageStore,
{
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "counts add up per key, hour, route and outcome, and read back by hour and by day",
        adds_and_buckets(fixtures).await,
    );
    record(
        "totals per key and outcome cover the period, its end excluded",
        totals(fixtures).await,
    );
    record(
        "reads are scoped to the organization; unknown keys' counts are dropped",
        scoped(fixtures).await,
    );
    record(
        "retention deletes the oldest counts first, at most a batch at a time",
        retention(fixtures).await,
    );
    report
}

/// An organization with a key; the key's id, as the store's lookup tells it.
pub(super) async fn organization_with_key<F: StoreFixtures>(
    fixtures: &F,
) -> Result<(String, String), String> {
    let ns = namespace();
    let org = organization(fixtures, &ns, "usage").await?;
    let plaintext = key(fixtures, &ns, "usage", &org.id).await?;
    let principal = lookup(fixtures, &plaintext)
        .await?
        .ok_or("a key just added does not resolve")?;
    Ok((org.id, principal.key_id.to_string()))
}

/// `hours` hours after 2026-01-01T00:00:00Z.
fn hour(hours: i64) -> Timestamp {
    Timestamp::from_unix_millis(1_767_225_600_000 + hours * 3_600_000)
        .unwrap_or_else(Timestamp::now)
}

fn count(
    key_id: &str,
    at: Timestamp,
    route: UsageRoute,
    outcome: UsageOutcome,
    n: u64,
) -> UsageCount {
    UsageCount {
        key_id: key_id.to_owned(),
        hour: at,
        route,
        outcome,
        count: n,
    }
}

fn january() -> UsagePeriod {
    UsagePeriod {
        from: hour(0),
        to: hour(31 * 24),
    }
}

async fn adds_and_buckets<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: UsageStore,
{
    let (org, id) = organization_with_key(fixtures).await?;
    let store = fixtures.store();
    let (me, ok) = (UsageRoute::Me, UsageOutcome::Ok);
    // Two writes of the same hour add; 10:00 and 11:00 of one day, and the next day.
    for batch in [
        vec![
            count(&id, hour(10), me, ok, 3),
            count(&id, hour(11), me, ok, 4),
        ],
        vec![
            count(&id, hour(10), me, ok, 2),
            count(&id, hour(34), UsageRoute::Orders, UsageOutcome::Revoked, 1),
        ],
    ] {
        store
            .record_usage(&batch)
            .await
            .map_err(failed("record_usage"))?;
    }
    let hourly = store
        .key_usage(&org, &id, january(), UsageGranularity::Hour)
        .await
        .map_err(failed("key_usage"))?;
    let seen: Vec<(Timestamp, UsageRoute, UsageOutcome, u64)> = hourly
        .iter()
        .map(|bucket| (bucket.start, bucket.route, bucket.outcome, bucket.count))
        .collect();
    ensure!(
        seen == [
            (hour(10), me, ok, 5),
            (hour(11), me, ok, 4),
            (hour(34), UsageRoute::Orders, UsageOutcome::Revoked, 1),
        ],
        "by hour: {seen:?}"
    );
    let daily = store
        .key_usage(&org, &id, january(), UsageGranularity::Day)
        .await
        .map_err(failed("key_usage"))?;
    let seen: Vec<(Timestamp, UsageRoute, UsageOutcome, u64)> = daily
        .iter()
        .map(|bucket| (bucket.start, bucket.route, bucket.outcome, bucket.count))
        .collect();
    ensure!(
        seen == [
            (hour(0), me, ok, 9),
            (hour(24), UsageRoute::Orders, UsageOutcome::Revoked, 1),
        ],
        "by day: {seen:?}"
    );
    Ok(())
}

async fn totals<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: UsageStore,
{
    let (org, first) = organization_with_key(fixtures).await?;
    let ns = namespace();
    let second_key = key(fixtures, &ns, "second", &org).await?;
    let second = lookup(fixtures, &second_key)
        .await?
        .ok_or("a key just added does not resolve")?
        .key_id
        .to_string();
    let quiet_key = key(fixtures, &ns, "quiet", &org).await?;
    lookup(fixtures, &quiet_key).await?;
    let store = fixtures.store();
    let (me, orders) = (UsageRoute::Me, UsageRoute::Orders);
    store
        .record_usage(&[
            count(&first, hour(1), me, UsageOutcome::Ok, 2),
            count(&first, hour(2), orders, UsageOutcome::Ok, 3),
            count(&first, hour(2), orders, UsageOutcome::RateLimited, 1),
            count(&second, hour(5), orders, UsageOutcome::Expired, 7),
            // At the period's end: not in it.
            count(&second, hour(6), orders, UsageOutcome::Expired, 100),
        ])
        .await
        .map_err(failed("record_usage"))?;
    let period = UsagePeriod {
        from: hour(0),
        to: hour(6),
    };
    let totals = store
        .usage_totals(&org, period)
        .await
        .map_err(failed("usage_totals"))?;
    let mut seen: Vec<(String, UsageOutcome, u64)> = totals
        .iter()
        .map(|total| (total.key_id.clone(), total.outcome, total.count))
        .collect();
    let mut expected = vec![
        (first.clone(), UsageOutcome::Ok, 5),
        (first.clone(), UsageOutcome::RateLimited, 1),
        (second.clone(), UsageOutcome::Expired, 7),
    ];
    seen.sort();
    expected.sort();
    ensure!(seen == expected, "totals: {seen:?}");
    Ok(())
}

async fn scoped<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: UsageStore,
{
    let (org, id) = organization_with_key(fixtures).await?;
    let (other, _) = organization_with_key(fixtures).await?;
    let store = fixtures.store();
    store
        .record_usage(&[
            count(&id, hour(3), UsageRoute::Me, UsageOutcome::Ok, 1),
            count(
                "no-such-key-0",
                hour(3),
                UsageRoute::Me,
                UsageOutcome::Ok,
                1,
            ),
            count("999999999999", hour(3), UsageRoute::Me, UsageOutcome::Ok, 1),
        ])
        .await
        .map_err(failed("record_usage with keys the store does not know"))?;
    let not_found = Some(StoreErrorKind::NotFound);
    ensure!(
        kind_of(
            store
                .key_usage(&other, &id, january(), UsageGranularity::Hour)
                .await
        ) == not_found,
        "another organization read the key's usage"
    );
    ensure!(
        kind_of(
            store
                .key_usage(&org, "no-such-key-0", january(), UsageGranularity::Hour)
                .await
        ) == not_found,
        "an unknown key's usage is not NotFound"
    );
    let missing = format!("{}_missing", namespace());
    ensure!(
        kind_of(store.usage_totals(&missing, january()).await) == not_found,
        "an unknown organization's totals are not NotFound"
    );
    let totals = store
        .usage_totals(&other, january())
        .await
        .map_err(failed("usage_totals"))?;
    ensure!(totals.is_empty(), "another organization sees {totals:?}");
    Ok(())
}

async fn retention<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: UsageStore,
{
    let (org, id) = organization_with_key(fixtures).await?;
    let store = fixtures.store();
    // Hours of 2001, and one of 2026.
    let old = |hours: i64| {
        Timestamp::from_unix_millis(978_307_200_000 + hours * 3_600_000)
            .unwrap_or_else(Timestamp::now)
    };
    store
        .record_usage(&[
            count(&id, old(0), UsageRoute::Me, UsageOutcome::Ok, 1),
            count(&id, old(1), UsageRoute::Me, UsageOutcome::Ok, 1),
            count(&id, old(2), UsageRoute::Me, UsageOutcome::Ok, 1),
            count(&id, hour(7), UsageRoute::Me, UsageOutcome::Ok, 1),
        ])
        .await
        .map_err(failed("record_usage"))?;
    // Older than the start of 2002, by the store's clock.
    let since_2002 = Timestamp::now()
        .duration_since(
            Timestamp::from_unix_millis(1_009_843_200_000).unwrap_or_else(Timestamp::now),
        )
        .unwrap_or(Duration::ZERO);
    let mut deleted = Vec::new();
    for _ in 0..3 {
        deleted.push(
            store
                .prune_usage(since_2002, 2)
                .await
                .map_err(failed("prune_usage"))?,
        );
    }
    ensure!(deleted == [2, 1, 0], "batches of 2 deleted {deleted:?}");
    let period = UsagePeriod {
        from: old(0),
        to: hour(31 * 24),
    };
    let left = store
        .key_usage(&org, &id, period, UsageGranularity::Hour)
        .await
        .map_err(failed("key_usage"))?;
    ensure!(
        left.len() == 1 && left[0].start == hour(7),
        "after retention: {left:?}"
    );
    Ok(())
}
