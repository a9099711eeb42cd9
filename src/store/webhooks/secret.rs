//! An endpoint's signing secret, as a store saves it and the signer uses it.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

const PREFIX: &str = "whsec_";

/// An endpoint's signing secret: `whsec_` and the base64 of 32 random bytes.
///
/// Its `Debug` shows only `whsec_…`; the secret itself is read through
/// [`expose`](Self::expose), which is how a store saves it and how the one response that
/// shows it to the organization writes it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    text: String,
    bytes: Vec<u8>,
}

impl WebhookSecret {
    /// Makes a new secret from 32 bytes of the operating system's random generator.
    ///
    /// # Errors
    ///
    /// When the generator fails.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0_u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self {
            text: format!("{PREFIX}{}", STANDARD.encode(bytes)),
            bytes: bytes.to_vec(),
        })
    }

    /// Returns the secret as text (`whsec_...`).
    pub fn expose(&self) -> &str {
        &self.text
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(whsec_…)")
    }
}

/// The error of reading a secret that is not `whsec_` and base64 (its text is not repeated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSecret;

impl fmt::Display for InvalidSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a webhook secret is `whsec_` followed by base64 of at least 16 bytes")
    }
}

impl std::error::Error for InvalidSecret {}

impl FromStr for WebhookSecret {
    type Err = InvalidSecret;

    /// Reads a secret as [`expose`](Self::expose) writes it. Secrets of 16 to 64 bytes are
    /// accepted, so a partner can verify with secrets other services made.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let encoded = text.strip_prefix(PREFIX).ok_or(InvalidSecret)?;
        let bytes = STANDARD.decode(encoded).map_err(|_| InvalidSecret)?;
        if !(16..=64).contains(&bytes.len()) {
            return Err(InvalidSecret);
        }
        Ok(Self {
            text: text.to_owned(),
            bytes,
        })
    }
}
