//! The conformance suite of [`DeprecatedCallStore`]: counts add up and keep the later last
//! call, reads are scoped to the organization (and to one key when asked) and start at the day
//! of `since`, retention deletes the oldest days first in batches.

use std::time::Duration;

use super::calls::{key, lookup};
use super::report::{ensure, failed, kind_of, Check, Report};
use super::usage::organization_with_key;
use super::{namespace, StoreFixtures};
use crate::model::Timestamp;
use crate::store::StoreErrorKind;
use crate::store::{DeprecatedCallCount, DeprecatedCallStore};

/// Runs the checks of a [`DeprecatedCallStore`] against the store of `fixtures`. Each check
/// uses organizations and keys of its own, and days long past (2001 and 2026-01), so it runs
/// against a store that holds other data; the retention check deletes only counts of days
/// before 2002.
pub async fn run_deprecated_calls<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: DeprecatedCallStore,
{
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "calls add up per key, day and target (a route, a parameter, a version), the later last call kept, by target then key",
        adds_up(fixtures).await,
    );
    record(
        "reads are scoped to the organization and to the key asked for, from the day of since; \
         unknown keys' counts are dropped",
        scoped(fixtures).await,
    );
    record(
        "retention deletes the oldest days first, at most a batch at a time",
        retention(fixtures).await,
    );
    report
}

/// `seconds` seconds after 2026-01-01T00:00:00Z.
fn at(seconds: i64) -> Timestamp {
    Timestamp::from_unix_millis(1_767_225_600_000 + seconds * 1000).unwrap_or_else(Timestamp::now)
}

const DAY: i64 = 86_400;

/// `calls` calls of `target` by `key_id` on the day of `last`, the last of them at `last`.
fn count(key_id: &str, target: &str, calls: u64, last: Timestamp) -> DeprecatedCallCount {
    let millis = last.as_datetime().timestamp_millis();
    DeprecatedCallCount {
        key_id: key_id.to_owned(),
        day: Timestamp::from_unix_millis(millis - millis.rem_euclid(DAY * 1000)).unwrap_or(last),
        target: target.to_owned(),
        calls,
        last_call_at: last,
    }
}

async fn adds_up<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: DeprecatedCallStore,
{
    let (org, first) = organization_with_key(fixtures).await?;
    let second_key = key(fixtures, &namespace(), "second", &org).await?;
    let second = lookup(fixtures, &second_key)
        .await?
        .ok_or("a key just added does not resolve")?
        .key_id
        .to_string();
    let store = fixtures.store();
    let provider = "/orders?provider";
    // Two writes of one day add; the earlier last call of the second write does not win.
    for batch in [
        vec![
            count(&first, provider, 3, at(100)),
            count(&first, "/me", 1, at(50)),
            // A version's calls (calls per version, one path with the deprecated calls).
            count(&first, "2026-11-28", 6, at(70)),
        ],
        vec![
            count(&first, provider, 2, at(90)),
            count(&first, provider, 4, at(DAY + 7)),
            count(&second, provider, 1, at(2 * DAY)),
            // The same key, day and target twice in one batch (a batch merged from replicas).
            count(&second, provider, 2, at(2 * DAY + 5)),
        ],
    ] {
        store
            .record_deprecated_calls(&batch)
            .await
            .map_err(failed("record_deprecated_calls"))?;
    }
    let totals = store
        .deprecated_calls(&org, None, at(0))
        .await
        .map_err(failed("deprecated_calls"))?;
    let seen: Vec<(String, String, u64, Timestamp)> = totals
        .into_iter()
        .map(|t| (t.target, t.key_id, t.calls, t.last_call_at))
        .collect();
    let mut expected = vec![
        ("/me".to_owned(), first.clone(), 1, at(50)),
        ("2026-11-28".to_owned(), first.clone(), 6, at(70)),
        (provider.to_owned(), first.clone(), 9, at(DAY + 7)),
        (provider.to_owned(), second.clone(), 3, at(2 * DAY + 5)),
    ];
    expected.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    ensure!(seen == expected, "totals: {seen:?}, expected {expected:?}");
    Ok(())
}

async fn scoped<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: DeprecatedCallStore,
{
    let (org, id) = organization_with_key(fixtures).await?;
    let (other, other_id) = organization_with_key(fixtures).await?;
    let store = fixtures.store();
    store
        .record_deprecated_calls(&[
            count(&id, "/me", 1, at(10)),
            count(&id, "/me", 2, at(3 * DAY + 10)),
            count(&other_id, "/me", 5, at(3 * DAY + 20)),
            count("no-such-key-0", "/me", 1, at(10)),
            count("999999999999", "/me", 1, at(10)),
        ])
        .await
        .map_err(failed(
            "record_deprecated_calls with keys the store does not know",
        ))?;
    // From the day `since` falls in: the first day's call is before it.
    let since = at(3 * DAY + 3600);
    let mine = store
        .deprecated_calls(&org, None, since)
        .await
        .map_err(failed("deprecated_calls"))?;
    let seen: Vec<(&str, u64)> = mine.iter().map(|t| (t.key_id.as_str(), t.calls)).collect();
    ensure!(
        seen == [(id.as_str(), 2)],
        "from the day of since: {seen:?}"
    );
    let one = store
        .deprecated_calls(&org, Some(&id), at(0))
        .await
        .map_err(failed("deprecated_calls of one key"))?;
    ensure!(
        one.len() == 1 && one[0].calls == 3,
        "one key's calls: {one:?}"
    );
    let foreign = store
        .deprecated_calls(&org, Some(&other_id), at(0))
        .await
        .map_err(failed("deprecated_calls of another organization's key"))?;
    ensure!(
        foreign.is_empty(),
        "another organization's key read through this one: {foreign:?}"
    );
    let unknown = store
        .deprecated_calls(&org, Some("no-such-key-0"), at(0))
        .await
        .map_err(failed("deprecated_calls of an unknown key"))?;
    ensure!(unknown.is_empty(), "an unknown key has calls: {unknown:?}");
    let theirs = store
        .deprecated_calls(&other, None, at(0))
        .await
        .map_err(failed("deprecated_calls"))?;
    ensure!(
        theirs.len() == 1 && theirs[0].key_id == other_id && theirs[0].calls == 5,
        "the other organization reads {theirs:?}"
    );
    let missing = format!("{}_missing", namespace());
    ensure!(
        kind_of(store.deprecated_calls(&missing, None, at(0)).await)
            == Some(StoreErrorKind::NotFound),
        "an unknown organization's calls are not NotFound"
    );
    Ok(())
}

async fn retention<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: DeprecatedCallStore,
{
    let (org, id) = organization_with_key(fixtures).await?;
    let store = fixtures.store();
    // Days of 2001, and one of 2026.
    let old = |days: i64| {
        Timestamp::from_unix_millis(978_307_200_000 + days * DAY * 1000)
            .unwrap_or_else(Timestamp::now)
    };
    store
        .record_deprecated_calls(&[
            count(&id, "/me", 1, old(0)),
            count(&id, "/me", 1, old(1)),
            count(&id, "/me", 1, old(2)),
            count(&id, "/me", 1, at(7)),
        ])
        .await
        .map_err(failed("record_deprecated_calls"))?;
    let since_2002 = Timestamp::now()
        .duration_since(
            Timestamp::from_unix_millis(1_009_843_200_000).unwrap_or_else(Timestamp::now),
        )
        .unwrap_or(Duration::ZERO);
    // Other checks' old days may be deleted too (any store may hold them): the oldest first,
    // so the first call deletes 2001's first two days of this key at least.
    let mut deleted = 0;
    loop {
        let batch = store
            .prune_deprecated_calls(since_2002, 2)
            .await
            .map_err(failed("prune_deprecated_calls"))?;
        ensure!(batch <= 2, "a batch of 2 deleted {batch}");
        deleted += batch;
        if batch < 2 {
            break;
        }
    }
    ensure!(deleted >= 3, "deleted {deleted} of the 3 old days");
    let left = store
        .deprecated_calls(&org, Some(&id), old(0))
        .await
        .map_err(failed("deprecated_calls"))?;
    let seen: Vec<(u64, Timestamp)> = left.iter().map(|t| (t.calls, t.last_call_at)).collect();
    ensure!(seen == [(1, at(7))], "left after retention: {seen:?}");
    Ok(())
}
