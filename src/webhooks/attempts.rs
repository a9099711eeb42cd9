//! What an attempt keeps of an answer or a failure: the cause of a failure from a fixed set,
//! printable text, the wait before the next try (`Retry-After`, jitter).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::destination::BlockedDestination;

/// The fixed set of causes an attempt records when a request got no answer, or no answer
/// that could be read: never the transport's own text, which would tell an organization's
/// admin more about the network the deliveries leave from than whether their endpoint
/// answered. A name that does not resolve and one that resolves to a blocked address are one
/// cause. (A time-out waiting for the answer says the configured limit: `timed out after N
/// ms`.)
pub(super) mod cause {
    /// The host's name does not resolve, or resolves to an address in a blocked range.
    pub(crate) const NO_ADDRESS: &str = super::super::destination::NO_ADDRESS;
    /// No connection within the attempt's time-out.
    pub(crate) const CONNECT_TIMED_OUT: &str = "timed out connecting";
    /// The destination refused the connection.
    pub(crate) const REFUSED: &str = "connection refused";
    /// The TLS handshake failed (a certificate, a protocol, a server that is not TLS).
    pub(crate) const TLS: &str = "TLS handshake failed";
    /// The answer's status line and headers were over the client's limits (100 headers,
    /// about 400 KiB).
    pub(crate) const TOO_LARGE: &str = "the answer's head was too large";
    /// The endpoint's URL, or a request built from it, is not one HTTP can carry.
    pub(crate) const BAD_REQUEST: &str = "the request could not be built from the endpoint's URL";
    /// Anything else that ended the exchange before an answer (a reset, a closed connection,
    /// an answer that is not HTTP).
    pub(crate) const NO_ANSWER: &str = "the connection failed before an answer";
}

/// Which of the fixed [`cause`]s `error`, the HTTP client's, is.
pub(super) fn transport_failure(error: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.downcast_ref::<rustls::Error>().is_some() {
            return cause::TLS;
        }
        // hyper's `is_parse_too_large` exists only with its server feature, which the
        // library does not enable: its parse error says "too large" in its own words.
        if error
            .downcast_ref::<hyper::Error>()
            .is_some_and(|error| error.is_parse() && error.to_string().contains("too large"))
        {
            return cause::TOO_LARGE;
        }
        if error.downcast_ref::<BlockedDestination>().is_some() {
            return cause::NO_ADDRESS;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return cause::REFUSED,
                // The connect time-out (the attempt's, shared by a name's addresses).
                std::io::ErrorKind::TimedOut => return cause::CONNECT_TIMED_OUT,
                _ => {}
            }
            // An io::Error's `source` is the source of the error it wraps, skipping that
            // error (a TLS connector's rustls error, the resolver's refusal): step into it.
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
                continue;
            }
        }
        next = error.source();
    }
    cause::NO_ANSWER
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

    /// The causes found however deep the client wraps them, as hyper-util and the TLS
    /// connector do (an io::Error in an io::Error, whose `source` skips the inner one); the
    /// connect time-out here, as a test cannot make a network drop a SYN on cue.
    #[test]
    fn causes_are_found_through_wrapped_io_errors() {
        use std::io::{Error, ErrorKind};
        let wrapped = |inner: Error| Error::other(inner);
        let cases: [(Error, &str); 4] = [
            (
                wrapped(Error::new(ErrorKind::TimedOut, "connect timed out")),
                cause::CONNECT_TIMED_OUT,
            ),
            (
                wrapped(Error::new(
                    ErrorKind::InvalidData,
                    rustls::Error::InvalidCertificate(rustls::CertificateError::Expired),
                )),
                cause::TLS,
            ),
            (
                wrapped(Error::other(BlockedDestination::Resolved)),
                cause::NO_ADDRESS,
            ),
            (
                Error::new(ErrorKind::BrokenPipe, "10.1.2.3:443"),
                cause::NO_ANSWER,
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(transport_failure(&error), expected, "{error:?}");
        }
        // A refusal by the resolver reads as the cause it is.
        assert_eq!(BlockedDestination::Resolved.to_string(), cause::NO_ADDRESS);
    }

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
