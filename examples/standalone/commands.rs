//! The subcommands of the command line and their flags: `migrate`, `indexes`, `keys`,
//! `audit`, `webhooks` and `order-capture`.

use clap::Subcommand;
use partner_api::key::KeyEnvironment;

/// The subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the migrations on the database of --database-url (or DATABASE_URL) and exit: with
    /// the owner's role, before replicas serve with --no-migrate. With --schema-map, also
    /// add the crate's triggers to the host's mapped tables.
    Migrate,
    /// Print the CREATE INDEX CONCURRENTLY statements the --schema-map needs on the host's
    /// tables, one a line (run them with psql; each is safe to run again). With --provider,
    /// only the index of that list of providers instead: it makes the pages of a key limited
    /// to exactly them (or filtered by exactly them) cost what unfiltered pages cost, on the crate's orders
    /// table or the mapped one; worth it for providers on more than about one order in a
    /// hundred.
    Indexes {
        /// Only those the database lacks.
        #[arg(long)]
        missing: bool,
        /// A provider of the list whose own index to print; repeatable (a key's whole list).
        #[arg(long = "provider", value_name = "PROVIDER")]
        provider: Vec<String>,
    },
    /// Switch the order writes of the database of --database-url (or DATABASE_URL) between
    /// the default mode (the crate's triggers write each change's event) and the capture
    /// mode (events built from the write-ahead log; needs wal_level = logical and a role with
    /// REPLICATION), or show which one is on. Every replica's server reads the capture.
    #[cfg(feature = "postgres")]
    OrderCapture {
        /// What to do.
        #[command(subcommand)]
        action: OrderCaptureAction,
    },
    /// Manage API keys in the database of --database-url (or DATABASE_URL). `issue` and
    /// `roll` print the new key alone on the first line and its record as JSON on the second;
    /// `list` prints one JSON record a line, newest first.
    Keys {
        /// What to do with keys.
        #[command(subcommand)]
        action: KeysAction,
    },
    /// Show an organization's audit log (the security log), newest first: one JSON entry a
    /// line. With --prune, delete the entries older than --retention-days instead (each
    /// pruned organization gets an audit.pruned entry; a role other than the owner's keeps
    /// at least 400 days whatever it asks).
    Audit(AuditArgs),
    /// Manage webhook endpoints in the database of --database-url (or DATABASE_URL). `add`
    /// and `rotate` print the endpoint's record with its `secret` as one JSON line; `list`
    /// and `attempts` print one JSON record a line, newest first.
    #[cfg(feature = "webhooks")]
    Webhooks {
        /// What to do with endpoints.
        #[command(subcommand)]
        action: WebhooksAction,
    },
}

/// What the `webhooks` subcommand does.
#[cfg(feature = "webhooks")]
#[derive(Subcommand, Debug)]
pub(crate) enum WebhooksAction {
    /// Add an endpoint; prints its record with its secret.
    Add {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// Where events are posted.
        #[arg(long)]
        url: String,
        /// An event type to send (repeatable; default: every type).
        #[arg(long = "event", value_name = "TYPE")]
        events: Vec<partner_api::webhooks::EventType>,
        /// Free text for people.
        #[arg(long, default_value = "")]
        description: String,
        /// The API version its orders' bodies are rendered at, `YYYY-MM-DD` (default: the
        /// newest).
        #[arg(long, value_name = "DATE", value_parser = parse_api_version)]
        api_version: Option<partner_api::versions::ApiVersion>,
        /// A provider whose orders it hears of; repeatable. Without it, every order. An
        /// order that comes into their view is its creation, one that leaves it its deletion.
        #[arg(long = "provider", value_name = "PROVIDER")]
        provider: Vec<String>,
    },
    /// Pin an endpoint to an API version: its orders' bodies are rendered at it from the next
    /// delivery attempt on. Prints its record.
    Pin {
        /// The endpoint.
        #[command(flatten)]
        endpoint: EndpointRef,
        /// The API version, `YYYY-MM-DD`.
        #[arg(long, value_name = "DATE", value_parser = parse_api_version)]
        api_version: partner_api::versions::ApiVersion,
    },
    /// List an organization's endpoints, newest first (without secrets).
    List {
        /// The organization's id.
        #[arg(long)]
        organization: String,
    },
    /// Give an endpoint a new secret; the old one keeps signing beside it for the overlap.
    Rotate {
        /// The endpoint.
        #[command(flatten)]
        endpoint: EndpointRef,
        /// Seconds the old secret keeps signing beside the new one.
        #[arg(long, value_name = "SECONDS", default_value_t = 86_400)]
        overlap: u64,
    },
    /// Enable an endpoint; prints its record.
    Enable(EndpointRef),
    /// Disable an endpoint; prints its record.
    Disable(EndpointRef),
    /// Remove an endpoint with its messages and attempts; prints {"removed":ID}.
    Remove(EndpointRef),
    /// Queue a webhook.test event for an endpoint; prints {"messageId":...}.
    Test(EndpointRef),
    /// List an endpoint's delivery attempts, newest first.
    Attempts(EndpointRef),
    /// Queue again every message to an endpoint that ran out of tries since a time; prints
    /// {"recovered":N}.
    Recover {
        /// The endpoint.
        #[command(flatten)]
        endpoint: EndpointRef,
        /// Messages raised at or after this RFC 3339 time.
        #[arg(long, value_name = "RFC3339")]
        since: partner_api::Timestamp,
    },
}

/// One endpoint of one organization.
#[cfg(feature = "webhooks")]
#[derive(clap::Args, Debug)]
pub(crate) struct EndpointRef {
    /// The organization's id.
    #[arg(long)]
    pub(crate) organization: String,
    /// The endpoint's id, as `list` shows it.
    #[arg(long)]
    pub(crate) id: String,
}

/// The `audit` subcommand's flags.
#[derive(clap::Args, Debug)]
pub(crate) struct AuditArgs {
    /// The organization's id.
    #[arg(long, required_unless_present = "prune", conflicts_with = "prune")]
    pub(crate) organization: Option<String>,
    /// Only entries of this action (such as key.revoked).
    #[arg(long)]
    pub(crate) action: Option<String>,
    /// Only entries of this key or endpoint id.
    #[arg(long)]
    pub(crate) target: Option<String>,
    /// The most entries to show.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) limit: u64,
    /// Delete the entries older than --retention-days, in batches, and print how many.
    #[arg(long)]
    pub(crate) prune: bool,
    /// With --prune: how many days entries are kept.
    #[arg(long, value_name = "DAYS", default_value_t = 400, requires = "prune")]
    pub(crate) retention_days: u64,
}

/// What the `keys` subcommand does.
#[derive(Subcommand, Debug)]
pub(crate) enum KeysAction {
    /// Issue a new key for an organization.
    Issue {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// A name for people.
        #[arg(long)]
        label: Option<String>,
        /// `live` or `test`: the key's prefix.
        #[arg(long, default_value = "live", value_parser = parse_environment)]
        environment: KeyEnvironment,
        /// Seconds until the key expires (default: never).
        #[arg(long, value_name = "SECONDS")]
        expires_in: Option<u64>,
        /// An address range (CIDR, or one address) the key may be used from; repeatable.
        /// Without it, any address.
        #[arg(long = "allow-ip", value_name = "CIDR", value_parser = parse_allowed_ip)]
        allow_ip: Vec<ipnet::IpNet>,
        /// The API version to pin the key to, `YYYY-MM-DD` (default: the newest).
        #[arg(long, value_name = "DATE", value_parser = parse_api_version)]
        api_version: Option<partner_api::versions::ApiVersion>,
        /// A route permission the key holds, `orders` or `events`; repeatable. Without it,
        /// every one.
        #[arg(long = "permission", value_name = "PERMISSION", value_parser = parse_permission)]
        permission: Vec<partner_api::key::Permission>,
        /// A provider whose orders the key may read; repeatable. Without it, every order.
        /// Its events feed is their view (an order that comes into it is created for the key,
        /// one that leaves it deleted).
        #[arg(long = "provider", value_name = "PROVIDER")]
        provider: Vec<String>,
    },
    /// Limit a key to the orders of some providers, or lift the limit with --any. Prints the
    /// key's record.
    #[command(group(clap::ArgGroup::new("providers").required(true).args(["provider", "any"])))]
    Providers {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
        /// A provider whose orders the key may read; repeatable.
        #[arg(long = "provider", value_name = "PROVIDER")]
        provider: Vec<String>,
        /// Every order: lift the limit.
        #[arg(long)]
        any: bool,
    },
    /// Set the routes a key may call: the permissions given, all of them, or none (the key
    /// keeps `/me`, `/deprecations` and `/versions`). Prints the key's record.
    #[command(group(clap::ArgGroup::new("granted").required(true).args(["permission", "all", "none"])))]
    Permissions {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
        /// A route permission, `orders` or `events`; repeatable.
        #[arg(long = "permission", value_name = "PERMISSION", value_parser = parse_permission)]
        permission: Vec<partner_api::key::Permission>,
        /// Every permission: lift the restriction.
        #[arg(long)]
        all: bool,
        /// No permission.
        #[arg(long)]
        none: bool,
    },
    /// Pin a key to an API version (an upgrade can be undone for 72 hours with --undo).
    /// Prints the key's record.
    Pin {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
        /// The API version, `YYYY-MM-DD`.
        #[arg(long, value_name = "DATE", value_parser = parse_api_version, required_unless_present = "undo", conflicts_with = "undo")]
        api_version: Option<partner_api::versions::ApiVersion>,
        /// Undo the key's last upgrade: back to the version it had (within 72 hours).
        #[arg(long)]
        undo: bool,
    },
    /// Set the address ranges a key may be used from; without --allow-ip, lift the
    /// restriction. Prints the key's record.
    Restrict {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
        /// An address range (CIDR, or one address) the key may be used from; repeatable.
        #[arg(long = "allow-ip", value_name = "CIDR", value_parser = parse_allowed_ip)]
        allow_ip: Vec<ipnet::IpNet>,
    },
    /// List an organization's keys, newest first.
    List {
        /// The organization's id.
        #[arg(long)]
        organization: String,
    },
    /// Revoke one key of an organization at once.
    Revoke {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
    },
    /// Replace a key by a new one; the old one keeps working for the overlap.
    Roll {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
        /// Seconds the old key keeps working beside the new one.
        #[arg(long, value_name = "SECONDS", default_value_t = 86_400)]
        overlap: u64,
        /// Seconds until the new key expires (default: as long as the old key was issued for;
        /// never, for a key issued without expiry).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
        expires_in: Option<u64>,
    },
    /// Show an organization's key policy, or change it with the flags given; prints it as
    /// JSON ({"maxKeyLifetimeSeconds": n or null, "maxActiveKeys": n, "maxWebhookEndpoints": n,
    /// "defaultApiVersion": "YYYY-MM-DD" or null}).
    Policy {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The longest a key may live from its issue or roll, in seconds; keys without
        /// expiry are then refused.
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "no_max_lifetime")]
        max_lifetime: Option<u64>,
        /// Lift the maximum lifetime.
        #[arg(long)]
        no_max_lifetime: bool,
        /// The most active keys the organization may have (default 100).
        #[arg(long, value_name = "N")]
        max_active_keys: Option<u32>,
        /// The most webhook endpoints the organization may have (default 20).
        #[arg(long, value_name = "N")]
        max_webhook_endpoints: Option<u32>,
        /// The API version new keys and webhook endpoints get when none is named,
        /// `YYYY-MM-DD`.
        #[arg(long, value_name = "DATE", value_parser = parse_api_version, conflicts_with = "newest_by_default")]
        default_api_version: Option<partner_api::versions::ApiVersion>,
        /// New keys and endpoints get the newest version again.
        #[arg(long)]
        newest_by_default: bool,
    },
    /// Show a key's requests per bucket, route and outcome: one JSON record a line
    /// ({"start", "route", "outcome", "count"}), oldest first.
    Usage {
        /// The organization's id.
        #[arg(long)]
        organization: String,
        /// The key's id, as `list` shows it.
        #[arg(long)]
        id: String,
        /// The period's first instant, RFC 3339 (default: 30 days before --to).
        #[arg(long, value_name = "RFC3339")]
        from: Option<String>,
        /// The period's end, not included, RFC 3339 (default: now).
        #[arg(long, value_name = "RFC3339")]
        to: Option<String>,
        /// `hour` or `day` (UTC).
        #[arg(long, default_value = "day", value_parser = ["hour", "day"])]
        granularity: String,
    },
    /// The organization's keys that called deprecated routes or parameters in the last 30
    /// days, and their calls per API version (the target a version, `2026-11-28`): one JSON
    /// record a line, {"keyId","target","calls","lastCallAt"}, by target then key id.
    DeprecatedCalls {
        /// The organization's id.
        #[arg(long)]
        organization: String,
    },
    /// Tell every replica's caches to drop what they hold (keys and pages of orders): after a
    /// change that bypassed the triggers, such as a restore with --disable-triggers or
    /// writes under session_replication_role = replica. Prints {"invalidated":"all"}.
    Invalidate,
}

/// One range as the API's key management reads it: no bits past the prefix length.
fn parse_permission(name: &str) -> Result<partner_api::key::Permission, String> {
    partner_api::key::Permission::parse(name).ok_or_else(|| {
        format!("{name:?} is not a permission; the permissions are orders and events")
    })
}

fn parse_allowed_ip(text: &str) -> Result<ipnet::IpNet, String> {
    let parsed = partner_api::key::AllowedIps::parse([text]).map_err(|err| err.to_string())?;
    parsed
        .ranges()
        .first()
        .copied()
        .ok_or_else(|| format!("{text:?} is not an address range"))
}

fn parse_environment(name: &str) -> Result<KeyEnvironment, String> {
    name.parse()
        .map_err(|err: partner_api::key::UnknownEnvironment| err.to_string())
}

/// What `order-capture` does.
#[cfg(feature = "postgres")]
#[derive(Subcommand, Debug)]
pub(crate) enum OrderCaptureAction {
    /// Switch to the capture mode (creates the slot; refused, naming the setting, when the
    /// server or role cannot give one). Prints `capture SLOT`.
    Start,
    /// Switch back to the triggers: holds the order writes until the capture has
    /// materialized every change written without them, then drops the slot. Prints
    /// `triggers`.
    Stop {
        /// Seconds to wait for the capture to catch up before giving up (nothing changed).
        #[arg(long, value_name = "SECONDS", default_value_t = 30)]
        drain_seconds: u64,
    },
    /// Print the mode: `triggers`, or `capture SLOT`.
    Status,
    /// Read the capture in the foreground until stopped (a process dedicated to it; every
    /// server reads it too, one replica at a time).
    Run {
        /// How many decoded rows (an order change, or a transaction's begin or commit) a
        /// round reads at most; 10 at least.
        #[arg(long, value_name = "CHANGES", default_value_t = partner_api::OrderCapture::DEFAULT_BATCH)]
        batch: u32,
    },
}

/// The organization's default API version for new keys and endpoints (its key policy's),
/// when it has one the API offers.
#[cfg(feature = "postgres")]
pub(crate) async fn default_api_version(
    store: &partner_api::PgStore,
    organization: &str,
) -> Option<partner_api::versions::ApiVersion> {
    use partner_api::store::KeyManager;
    let policy = store.key_policy(organization).await.ok()?;
    policy
        .default_api_version
        .filter(|version| partner_api::versions::Versions::shipped().offers(*version))
}

/// An API version this host offers, `YYYY-MM-DD`.
fn parse_api_version(text: &str) -> Result<partner_api::versions::ApiVersion, String> {
    let versions = partner_api::versions::Versions::shipped();
    let offered = || {
        versions
            .offered()
            .map(|version| version.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match text.parse() {
        Ok(version) if versions.offers(version) => Ok(version),
        _ => Err(format!("not a version of the API, one of {}", offered())),
    }
}
