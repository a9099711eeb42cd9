//! Seed files: organizations, API keys and orders as JSON, and the built-in demo data.
//!
//! ```json
//! {"organizations": [{"id": "org_1", "name": "Acme"}],
//!  "apiKeys": [{"key": "<plaintext>", "organizationId": "org_1", "revoked": false,
//!               "label": "Reporting", "expiresAt": "2027-01-01T00:00:00Z"}],
//!  "orders": [{"organizationId": "org_1", "id": "ord_1", "providers": ["meta"],
//!              "advertiserName": "Acme", "campaignName": "Spring", "budgetDkk": 1000,
//!              "startDate": "2026-01-01", "endDate": "2026-02-01", "status": "booked",
//!              "externalReference": "PO-1", "createdAt": "2026-01-01T10:00:00.000Z"}]}
//! ```
//!
//! Each of the three lists may be left out; `revoked` defaults to `false`, `label` and
//! `expiresAt` to none; members that the format does not name are ignored.

use std::fmt;
use std::path::Path;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::model::{Order, Organization, Timestamp};

/// The contents of a seed file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seed {
    /// The organizations.
    #[serde(default)]
    pub organizations: Vec<Organization>,
    /// The API keys, in plaintext, each of one organization.
    #[serde(default)]
    pub api_keys: Vec<SeedKey>,
    /// The orders, each of one organization.
    #[serde(default)]
    pub orders: Vec<SeedOrder>,
}

/// An API key of a seed file.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedKey {
    /// The plaintext key: an RFC 6750 token, taken as it is.
    pub key: String,
    /// The organization the key belongs to.
    pub organization_id: String,
    /// Whether the key is revoked (then it is known, but answers 401).
    #[serde(default)]
    pub revoked: bool,
    /// A name for people, as a Settings page shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When the key expires, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

impl fmt::Debug for SeedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeedKey")
            .field("key", &"<redacted>")
            .field("organization_id", &self.organization_id)
            .field("revoked", &self.revoked)
            .field("label", &self.label)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// An order of a seed file: the order's ten fields and the organization it belongs to.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedOrder {
    /// The organization the order belongs to.
    pub organization_id: String,
    /// The order.
    #[serde(flatten)]
    pub order: Order,
}

/// Why a seed could not be read or loaded; the message names the file and the entry.
#[derive(Debug)]
pub struct SeedError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl SeedError {
    /// An error of `message` (what failed, naming the entry) caused by `source`.
    pub(crate) fn new(
        message: String,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            message,
            source: Some(source.into()),
        }
    }

    fn at(mut self, context: &str) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for SeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {}", crate::log::ErrorChain(&**source))?;
        }
        Ok(())
    }
}

impl std::error::Error for SeedError {}

impl Seed {
    /// Parses a seed from JSON text.
    ///
    /// # Errors
    ///
    /// When the text is not JSON of the seed format; the message names line and column.
    pub fn from_json(text: &str) -> Result<Self, SeedError> {
        serde_json::from_str(text).map_err(|err| SeedError::new("not a valid seed".into(), err))
    }

    /// Reads and parses the seed file at `path`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a valid seed; the message names the file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, SeedError> {
        let path = path.as_ref();
        let context = format!("seed file {}", path.display());
        let text = std::fs::read_to_string(path)
            .map_err(|err| SeedError::new("cannot be read".into(), err).at(&context))?;
        Self::from_json(&text).map_err(|err| err.at(&context))
    }

    /// Returns the built-in demo data: two organizations, one with 157 orders and one with 12, a key
    /// for each ([`DEMO_KEY`], [`DEMO_OTHER_KEY`]) and a revoked key ([`DEMO_REVOKED_KEY`]).
    pub fn demo() -> Self {
        const ADVERTISERS: [&str; 5] = [
            "Nordic Shoes",
            "Havn Coffee",
            "Lys Energy",
            "Bølge Bank",
            "Skov Outdoor",
        ];
        const PROVIDERS: [&str; 4] = ["meta", "google", "tiktok", "linkedin"];
        const STATUSES: [&str; 4] = ["draft", "booked", "live", "completed"];
        let organizations = vec![
            Organization {
                id: "org_demo".into(),
                name: "Demo Media Agency".into(),
            },
            Organization {
                id: "org_other".into(),
                name: "Other Agency".into(),
            },
        ];
        let api_keys = vec![
            SeedKey {
                key: DEMO_KEY.into(),
                organization_id: "org_demo".into(),
                revoked: false,
                label: Some("Demo integration".into()),
                expires_at: None,
            },
            SeedKey {
                key: DEMO_OTHER_KEY.into(),
                organization_id: "org_other".into(),
                revoked: false,
                label: None,
                expires_at: None,
            },
            SeedKey {
                key: DEMO_REVOKED_KEY.into(),
                organization_id: "org_demo".into(),
                revoked: true,
                label: Some("Old integration".into()),
                expires_at: None,
            },
        ];
        let start = NaiveDate::from_ymd_opt(2026, 1, 5).unwrap_or_default();
        // 2026-01-01T00:00:00Z; one order every 7 hours and 13 minutes.
        let first_created = 1_767_225_600_000_i64;
        let orders = (0..169_usize)
            .map(|n| {
                let organization_id = if n % 14 == 13 {
                    "org_other"
                } else {
                    "org_demo"
                };
                let start_date = start + chrono::Days::new(n as u64);
                SeedOrder {
                    organization_id: organization_id.into(),
                    order: Order {
                        id: format!("ord_{:04}", n + 1),
                        providers: PROVIDERS[..1 + n % PROVIDERS.len()]
                            .iter()
                            .map(|p| (*p).into())
                            .collect(),
                        advertiser_name: ADVERTISERS[n % ADVERTISERS.len()].into(),
                        campaign_name: format!("Campaign {}", n + 1),
                        budget_dkk: 10_000 + (n as u64 * 2_500),
                        start_date,
                        end_date: start_date + chrono::Days::new(30),
                        status: STATUSES[n % STATUSES.len()].into(),
                        external_reference: format!("PO-{}", 1000 + n),
                        created_at: Timestamp::from_unix_millis(
                            first_created + n as i64 * 26_000_000,
                        )
                        .unwrap_or_else(|| Timestamp::from_datetime(chrono::DateTime::UNIX_EPOCH)),
                        updated_at: None,
                    },
                }
            })
            .collect();
        Self {
            organizations,
            api_keys,
            orders,
        }
    }
}

/// The demo key of organization `org_demo` (157 orders) in [`Seed::demo`].
pub const DEMO_KEY: &str = "pk_test_demo_0123456789abcdefghijklmn";
/// The demo key of organization `org_other` (12 orders) in [`Seed::demo`].
pub const DEMO_OTHER_KEY: &str = "pk_test_other_0123456789abcdefghijklm";
/// A revoked demo key of `org_demo` in [`Seed::demo`]: it answers 401.
pub const DEMO_REVOKED_KEY: &str = "pk_test_revoked_0123456789abcdefghijk";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyDigest;
    use crate::store::OrderQuery;
    use crate::store::{KeyLookup, KeyStore, OrderStore};

    #[tokio::test]
    async fn demo_data_loads_with_the_documented_shape() {
        let store = Seed::demo().to_memory_store().unwrap();
        let demo = store
            .lookup(&KeyDigest::of(DEMO_KEY))
            .await
            .unwrap()
            .into_principal()
            .unwrap();
        assert_eq!(demo.organization.id, "org_demo");
        assert_eq!(
            store
                .orders("org_demo", &OrderQuery::newest(1000))
                .await
                .unwrap()
                .len(),
            157
        );
        assert_eq!(
            store
                .orders("org_other", &OrderQuery::newest(1000))
                .await
                .unwrap()
                .len(),
            12
        );
        assert!(matches!(
            store
                .lookup(&KeyDigest::of(DEMO_REVOKED_KEY))
                .await
                .unwrap(),
            KeyLookup::Revoked { .. }
        ));
    }

    #[test]
    fn the_documented_format_parses() {
        let seed = Seed::from_json(
            r#"{"organizations":[{"id":"org_1","name":"Acme"}],
                "apiKeys":[{"key":"k1","organizationId":"org_1","revoked":false}],
                "orders":[{"organizationId":"org_1","id":"o1","providers":["meta"],
                  "advertiserName":"A","campaignName":"C","budgetDkk":1000,
                  "startDate":"2026-01-01","endDate":"2026-02-01","status":"booked",
                  "externalReference":"PO-1","createdAt":"2026-01-01T10:00:00.000Z"}]}"#,
        )
        .unwrap();
        assert_eq!(seed.orders[0].order.budget_dkk, 1000);
        let float = Seed::from_json(
            r#"{"orders":[{"organizationId":"org_1","id":"o1","providers":[],
                  "advertiserName":"A","campaignName":"C","budgetDkk":2500.0,
                  "startDate":"2026-01-01","endDate":"2026-02-01","status":"booked",
                  "externalReference":"PO-1","createdAt":"2026-01-01T10:00:00Z"}]}"#,
        )
        .unwrap();
        assert_eq!(float.orders[0].order.budget_dkk, 2500);
        seed.to_memory_store().unwrap();
        assert!(Seed::from_json("{}").unwrap().to_memory_store().is_ok());
    }

    #[test]
    fn errors_name_the_entry_and_never_the_key() {
        let mut seed = Seed::demo();
        seed.api_keys[1].organization_id = "org_missing".into();
        let message = seed.to_memory_store().unwrap_err().to_string();
        assert!(message.contains("apiKeys[1]"), "{message}");
        assert!(message.contains("org_missing"), "{message}");
        assert!(!message.contains(DEMO_OTHER_KEY), "{message}");
        assert!(!format!("{seed:?}").contains(DEMO_KEY));

        let mut seed = Seed::demo();
        seed.orders[3].order.id = seed.orders[2].order.id.clone();
        let message = seed.to_memory_store().unwrap_err().to_string();
        assert!(message.contains("ord_0003"), "{message}");

        let message = Seed::from_json(r#"{"orders":[{"id":1}]}"#)
            .unwrap_err()
            .to_string();
        assert!(message.contains("line 1"), "{message}");
        let message = Seed::from_path("/nonexistent/seed.json")
            .unwrap_err()
            .to_string();
        assert!(message.contains("/nonexistent/seed.json"), "{message}");
    }
}
