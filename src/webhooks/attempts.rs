//! What an attempt keeps of an answer or a failure: the cause of a failure from a fixed set,
//! printable text, the wait before the next try (`Retry-After`, jitter).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::destination::BlockedDestination;

/// Why a request got no answer, as one of a fixed set of causes: an attempt records this,
/// never the transport's own text, which would tell an organization's admin more about the
/// network the deliveries leave from than whether their endpoint answered (a name that does
/// not resolve and one that resolves to a blocked address are one cause).
pub(super) fn transport_failure(error: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.downcast_ref::<rustls::Error>().is_some() {
            return "TLS handshake failed";
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if inner.downcast_ref::<BlockedDestination>().is_some() {
                    return "the name does not resolve to an address deliveries may reach";
                }
                if inner.downcast_ref::<rustls::Error>().is_some() {
                    return "TLS handshake failed";
                }
            }
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused",
                // The connect time-out (the attempt's, shared by a name's addresses).
                std::io::ErrorKind::TimedOut => return "timed out connecting",
                _ => {}
            }
        }
        next = error.source();
    }
    "the connection failed before an answer"
}

/// `wait` times a random factor in [0.8, 1.2), so retries of many deliveries that failed
/// together do not arrive together.
pub(super) fn jitter(wait: Duration) -> Duration {
    let mut random = [0_u8; 4];
    let unit = match getrandom::fill(&mut random) {
        Ok(()) => f64::from(u32::from_le_bytes(random)) / f64::from(u32::MAX),
        Err(_) => 0.5,
    };
    Duration::try_from_secs_f64(wait.as_secs_f64() * (0.8 + 0.4 * unit)).unwrap_or(wait)
}

/// `text` without NUL characters (PostgreSQL's text refuses them) and at most 1,000
/// characters: what a receiver answered or an error said, as an attempt keeps it.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .take(1000)
        .map(|c| if c == '\0' { '\u{fffd}' } else { c })
        .collect()
}

pub(super) fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    })
}

/// `Retry-After` as delta seconds or an HTTP date.
pub(super) fn parse_retry_after(value: &str) -> Option<Duration> {
    if let Ok(seconds) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value.trim()).ok()?;
    let wait = date.timestamp() - unix_seconds(SystemTime::now());
    Some(Duration::from_secs(u64::try_from(wait).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    #[test]
    fn jitter_stays_within_twenty_percent() {
        for _ in 0..1000 {
            let wait = jitter(Duration::from_secs(100));
            assert!(
                wait >= Duration::from_secs(80) && wait <= Duration::from_secs(120),
                "{wait:?}"
            );
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        let later = (Timestamp::now().as_datetime() + chrono::Duration::seconds(600)).to_rfc2822();
        let wait = parse_retry_after(&later).unwrap();
        assert!(
            wait > Duration::from_secs(590) && wait <= Duration::from_secs(600),
            "{wait:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
