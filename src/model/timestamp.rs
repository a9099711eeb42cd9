//! [`Timestamp`]: the instants the API serves, with millisecond precision.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// 0000-01-01T00:00:00.000Z in milliseconds from the Unix epoch: the earliest instant RFC 3339
/// can write.
const EARLIEST_MILLIS: i64 = -62_167_219_200_000;
/// 9999-12-31T23:59:59.999Z: the latest.
const LATEST_MILLIS: i64 = 253_402_300_799_999;

/// A UTC instant with millisecond precision, served as `2026-03-01T08:00:00.000Z`.
///
/// Construction truncates to whole milliseconds, so two timestamps that are served alike also
/// compare equal and the id tie-break of the newest-first order is what a reader sees.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// Wraps `instant`, truncated to whole milliseconds.
    pub fn from_datetime(instant: DateTime<Utc>) -> Self {
        let millis = instant.nanosecond() / 1_000_000 * 1_000_000;
        Self(instant.with_nanosecond(millis).unwrap_or(instant))
    }

    /// Creates the instant `millis` milliseconds after the Unix epoch, if it lies in the years
    /// 0000 to 9999: the instants RFC 3339 can write, and every database can hold.
    pub fn from_unix_millis(millis: i64) -> Option<Self> {
        (EARLIEST_MILLIS..=LATEST_MILLIS)
            .contains(&millis)
            .then(|| DateTime::from_timestamp_millis(millis).map(Self))
            .flatten()
    }

    /// Returns the current instant, by the system clock.
    pub fn now() -> Self {
        Self::from_datetime(DateTime::<Utc>::from(std::time::SystemTime::now()))
    }

    /// Returns the instant `duration` after this one, or the latest representable instant.
    pub fn saturating_add(self, duration: std::time::Duration) -> Self {
        chrono::TimeDelta::from_std(duration)
            .ok()
            .and_then(|delta| self.0.checked_add_signed(delta))
            .map_or(Self(DateTime::<Utc>::MAX_UTC), Self::from_datetime)
    }

    /// Returns the instant `duration` before this one, or the earliest representable instant.
    pub fn saturating_sub(self, duration: std::time::Duration) -> Self {
        chrono::TimeDelta::from_std(duration)
            .ok()
            .and_then(|delta| self.0.checked_sub_signed(delta))
            .map_or(Self(DateTime::<Utc>::MIN_UTC), Self::from_datetime)
    }

    /// Returns the time from `earlier` to this instant, or `None` when `earlier` is not
    /// earlier.
    pub fn duration_since(self, earlier: Self) -> Option<std::time::Duration> {
        (self.0 - earlier.0)
            .to_std()
            .ok()
            .filter(|duration| !duration.is_zero())
    }

    /// Returns the wrapped instant.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// Appends the instant as [`Display`](fmt::Display) writes it (`2026-03-01T08:00:00.000Z`)
    /// to `out`, without the formatting machinery or an allocation of its own: a page of
    /// events writes a hundred of them.
    pub(crate) fn write_rfc3339(&self, out: &mut Vec<u8>) {
        let (date, time) = (self.0.date_naive(), self.0.time());
        let year = date.year();
        // A leap second or a year past four digits: as chrono writes it.
        if !(0..=9999).contains(&year) || time.nanosecond() >= 1_000_000_000 {
            out.extend_from_slice(self.to_string().as_bytes());
            return;
        }
        let digits = |out: &mut Vec<u8>, value: u32, width: u32| {
            for place in (0..width).rev() {
                // A digit: below ten, so the cast cannot truncate.
                #[allow(clippy::cast_possible_truncation)]
                out.push(b'0' + (value / 10_u32.pow(place) % 10) as u8);
            }
        };
        // The year is 0 to 9999 here.
        #[allow(clippy::cast_sign_loss)]
        digits(out, year as u32, 4);
        out.push(b'-');
        digits(out, date.month(), 2);
        out.push(b'-');
        digits(out, date.day(), 2);
        out.push(b'T');
        digits(out, time.hour(), 2);
        out.push(b':');
        digits(out, time.minute(), 2);
        out.push(b':');
        digits(out, time.second(), 2);
        out.push(b'.');
        digits(out, time.nanosecond() / 1_000_000, 3);
        out.push(b'Z');
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(instant: DateTime<Utc>) -> Self {
        Self::from_datetime(instant)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The error of parsing a [`Timestamp`] from text that is not RFC 3339.
#[derive(Debug, Clone)]
pub struct TimestampParseError(chrono::ParseError);

impl fmt::Display for TimestampParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not an RFC 3339 timestamp: {}", self.0)
    }
}

impl std::error::Error for TimestampParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl FromStr for Timestamp {
    type Err = TimestampParseError;

    /// Parses any RFC 3339 timestamp (any offset, any precision) and converts it to UTC.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DateTime::parse_from_rfc3339(text)
            .map(|instant| Self::from_datetime(instant.with_timezone(&Utc)))
            .map_err(TimestampParseError)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The fast writer of event pages writes what `Display` writes, for every instant.
        #[test]
        fn the_rfc3339_writer_agrees_with_display(millis in EARLIEST_MILLIS..=LATEST_MILLIS) {
            let timestamp = Timestamp::from_unix_millis(millis).expect("in range");
            let mut written = Vec::new();
            timestamp.write_rfc3339(&mut written);
            proptest::prop_assert_eq!(String::from_utf8(written).unwrap(), timestamp.to_string());
        }
    }

    #[test]
    fn the_rfc3339_writer_agrees_at_the_edges() {
        for millis in [EARLIEST_MILLIS, -1, 0, 1, 999, 1_000, LATEST_MILLIS] {
            let timestamp = Timestamp::from_unix_millis(millis).expect("in range");
            let mut written = Vec::new();
            timestamp.write_rfc3339(&mut written);
            assert_eq!(String::from_utf8(written).unwrap(), timestamp.to_string());
        }
        // Outside RFC 3339's four-digit years, as `Display` writes it.
        let far = Timestamp(DateTime::<Utc>::MAX_UTC);
        let mut written = Vec::new();
        far.write_rfc3339(&mut written);
        assert_eq!(String::from_utf8(written).unwrap(), far.to_string());
    }
}
