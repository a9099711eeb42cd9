//! [`PgTimestamp`] and [`PgDate`]: a `timestamptz` and a `date` read without trusting their
//! range.
//!
//! sqlx's chrono decoding adds the stored microseconds (or days) to its epoch unchecked, so a
//! value chrono cannot hold (`'infinity'`, `'-infinity'`, a year past 262143) panics the task
//! that reads it. PostgreSQL accepts such values, a host's own order tables may hold them, and a
//! documented role may write them into columns without a check. Every timestamp the crate
//! reads from PostgreSQL goes through this type instead, so such a row is an error of the
//! one call that read it (`InvalidData`: a 500 for a request, logged with the row and
//! counted in `partner_api_store_errors_total`), never a panic.

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type};

use crate::model::Timestamp;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01T00:00:00Z).
const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// A `timestamptz` column's value that [`Timestamp`] can hold, or a decoding error.
pub(super) struct PgTimestamp(pub(super) Timestamp);

impl Type<Postgres> for PgTimestamp {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <DateTime<Utc> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for PgTimestamp {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let instant = match value.format() {
            PgValueFormat::Binary => {
                let micros = <i64 as Decode<Postgres>>::decode(value)?;
                if micros == i64::MAX || micros == i64::MIN {
                    return Err("an infinite timestamp".into());
                }
                micros
                    .checked_add(POSTGRES_EPOCH_MICROS)
                    .and_then(DateTime::<Utc>::from_timestamp_micros)
            }
            // The text form (simple queries) is parsed, never added up: it cannot panic.
            PgValueFormat::Text => <DateTime<Utc> as Decode<Postgres>>::decode(value).ok(),
        };
        instant
            .and_then(|instant| Timestamp::from_unix_millis(instant.timestamp_millis()))
            .map(Self)
            .ok_or_else(|| "a timestamp outside the years 0000 to 9999".into())
    }
}

/// A `date` column's value in the years 1 to 9999 (what the contract's `YYYY-MM-DD` can
/// write), or a decoding error.
pub(super) struct PgDate(pub(super) NaiveDate);

impl Type<Postgres> for PgDate {
    fn type_info() -> PgTypeInfo {
        <NaiveDate as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <NaiveDate as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for PgDate {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let date = match value.format() {
            PgValueFormat::Binary => {
                let days = <i32 as Decode<Postgres>>::decode(value)?;
                if days == i32::MAX || days == i32::MIN {
                    return Err("an infinite date".into());
                }
                let delta = chrono::TimeDelta::try_days(days.into());
                NaiveDate::from_ymd_opt(2000, 1, 1)
                    .zip(delta)
                    .and_then(|(epoch, delta)| epoch.checked_add_signed(delta))
            }
            PgValueFormat::Text => <NaiveDate as Decode<Postgres>>::decode(value).ok(),
        };
        date.filter(|date| (1..=9999).contains(&date.year()))
            .map(Self)
            .ok_or_else(|| "a date outside the years 1 to 9999".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epochs_differ_by_thirty_years() {
        let postgres_epoch = DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z").unwrap();
        assert_eq!(postgres_epoch.timestamp_micros(), POSTGRES_EPOCH_MICROS);
    }
}
