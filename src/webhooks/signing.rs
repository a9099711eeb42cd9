//! Standard Webhooks signatures: HMAC-SHA256 over `"{id}.{timestamp}.{body}"` with the
//! endpoint's secret, sent as `v1,<base64>`; and the verifier for partners who write Rust.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::store::webhooks::WebhookSecret;

/// How far a delivery's `webhook-timestamp` may be from the verifier's clock, either way:
/// five minutes, as Standard Webhooks' reference verifiers have it. Refusing older ones is
/// what makes a captured delivery useless to replay later.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

fn mac(secret: &WebhookSecret, message_id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this never fails.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.key()).expect("HMAC accepts any key");
    mac.update(message_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Signs one delivery: `v1,` and the base64 of HMAC-SHA256 over `"{message_id}.{timestamp}.{body}"`,
/// the value (or, with several secrets, one of the space-separated values) of the
/// `webhook-signature` header.
///
/// ```
/// use partner_api::webhooks::{sign, WebhookSecret};
///
/// // The example of the Standard Webhooks specification.
/// let secret: WebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse()?;
/// let signature = sign(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
/// assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
/// # Ok::<(), partner_api::webhooks::InvalidSecret>(())
/// ```
pub fn sign(secret: &WebhookSecret, message_id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = mac(secret, message_id, timestamp, body)
        .finalize()
        .into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// Why [`verify`] refused a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// A `webhook-id`, `webhook-timestamp` or `webhook-signature` header is missing or not
    /// text.
    MissingHeader(&'static str),
    /// `webhook-timestamp` is not Unix seconds.
    InvalidTimestamp,
    /// `webhook-timestamp` is further than [`TIMESTAMP_TOLERANCE`] from now.
    TimestampOutOfTolerance,
    /// No `v1` signature matches a secret.
    NoMatchingSignature,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingHeader(name) => write!(f, "the {name} header is missing"),
            Self::InvalidTimestamp => f.write_str("webhook-timestamp is not Unix seconds"),
            Self::TimestampOutOfTolerance => {
                f.write_str("webhook-timestamp is more than five minutes from now")
            }
            Self::NoMatchingSignature => f.write_str("no signature matches the secret"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Verifies a delivery as a partner receives it: its headers, its body exactly as received,
/// and the endpoint's secrets (during a rotation, either one). Checks the timestamp against
/// `now` within [`TIMESTAMP_TOLERANCE`] and compares signatures in constant time. Returns the
/// `webhook-id`, which a receiver keeps to drop a delivery it already processed.
///
/// ```
/// use partner_api::webhooks::{sign, verify, WebhookSecret};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let secret = WebhookSecret::generate()?;
/// let body = br#"{"type":"webhook.test","timestamp":"2021-02-21T20:22:10.000Z","data":{}}"#;
/// let mut headers = http::HeaderMap::new();
/// headers.insert("webhook-id", "msg_1".parse()?);
/// headers.insert("webhook-timestamp", "1614265330".parse()?);
/// headers.insert("webhook-signature", sign(&secret, "msg_1", 1614265330, body).parse()?);
///
/// let now = UNIX_EPOCH + Duration::from_secs(1614265331);
/// assert_eq!(verify(&[secret], &headers, body, now)?, "msg_1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`VerifyError`] says which check failed.
pub fn verify<'h>(
    secrets: &[WebhookSecret],
    headers: &'h HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<&'h str, VerifyError> {
    let header = |name: &'static str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .ok_or(VerifyError::MissingHeader(name))
    };
    let message_id = header("webhook-id")?;
    let timestamp: i64 = header("webhook-timestamp")?
        .parse()
        .map_err(|_| VerifyError::InvalidTimestamp)?;
    let signatures = header("webhook-signature")?;
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    });
    if timestamp.abs_diff(now) > TIMESTAMP_TOLERANCE.as_secs() {
        return Err(VerifyError::TimestampOutOfTolerance);
    }
    let candidates = signatures
        .split(' ')
        .filter_map(|signature| signature.strip_prefix("v1,"))
        .filter_map(|encoded| STANDARD.decode(encoded).ok());
    for candidate in candidates {
        for secret in secrets {
            if mac(secret, message_id, timestamp, body)
                .verify_slice(&candidate)
                .is_ok()
            {
                return Ok(message_id);
            }
        }
    }
    Err(VerifyError::NoMatchingSignature)
}
