//! The `keys` subcommand: a key's whole life from the command line, on the database of
//! `--database-url`, for operators and scripts.

use std::process::ExitCode;

use crate::cli::{Args, KeysAction};

/// Runs `action` and returns the exit code: 0, or 1 with a message on standard error.
pub(crate) async fn run(args: &Args, action: &KeysAction) -> ExitCode {
    print(execute(args, action).await)
}

/// A subcommand's outcome: its lines on standard output and 0, or its error on standard error
/// and 1.
pub(crate) fn print(outcome: Result<Vec<String>, String>) -> ExitCode {
    match outcome {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `standalone migrate`: runs the migrations and exits, 0 or 1 with a message.
pub(crate) async fn migrate_only(args: &Args) -> ExitCode {
    #[cfg(feature = "postgres")]
    let migrated = match &args.database_url {
        Some(url) => crate::stores::database(args, url).await.map(|_| ()),
        None => Err("migrate needs a database: give --database-url or set DATABASE_URL".into()),
    };
    #[cfg(not(feature = "postgres"))]
    let migrated: Result<(), String> = {
        let _ = args;
        Err(
            "migrate works on a database: this build has no PostgreSQL support \
             (build with --features postgres)"
                .into(),
        )
    };
    match migrated {
        Ok(()) => {
            println!(r#"{{"migrated":true}}"#);
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "postgres"))]
async fn execute(_args: &Args, _action: &KeysAction) -> Result<Vec<String>, String> {
    Err(crate::stores::no_database_support("keys"))
}

/// The lines to print for `action`.
#[cfg(feature = "postgres")]
async fn execute(args: &Args, action: &KeysAction) -> Result<Vec<String>, String> {
    use std::time::Duration;

    use partner_api::key::Permissions;
    use partner_api::store::{IssuedKey, KeyManager, KeyRecord, NewKey, RollKey};

    let (store, failed) = crate::stores::command_database(args, "keys").await?;
    let json = |record: &KeyRecord| serde_json::to_string(record).map_err(|err| err.to_string());
    let shown = |issued: IssuedKey| Ok(vec![issued.plaintext().to_owned(), json(issued.record())?]);
    match action {
        KeysAction::Issue {
            organization,
            label,
            environment,
            expires_in,
            allow_ip,
            api_version,
            permission,
            provider,
        } => {
            let mut new = NewKey::new(*environment).with_allowed_ips(allowed_ips(allow_ip)?);
            if !permission.is_empty() {
                new = new.with_permissions(Permissions::of(permission.iter().copied()));
            }
            if !provider.is_empty() {
                new = new.with_providers(provider);
            }
            let default = crate::commands::default_api_version(&store, organization).await;
            if let Some(version) = api_version.or(default) {
                new = new.with_api_version(version);
            }
            if let Some(label) = label {
                new = new.with_label(label.clone());
            }
            if let Some(seconds) = expires_in {
                new = new.with_expires_in(Duration::from_secs(*seconds));
            }
            shown(store.issue(organization, new).await.map_err(failed)?)
        }
        KeysAction::List { organization } => store
            .list(organization)
            .await
            .map_err(failed)?
            .iter()
            .map(json)
            .collect(),
        KeysAction::Revoke { organization, id } => Ok(vec![json(
            &store.revoke(organization, id).await.map_err(failed)?,
        )?]),
        KeysAction::Pin {
            organization,
            id,
            api_version,
            undo,
        } => {
            let record = match (api_version, undo) {
                (Some(version), false) => store.pin_api_version(organization, id, *version).await,
                _ => store.roll_back_api_version(organization, id).await,
            };
            Ok(vec![json(&record.map_err(failed)?)?])
        }
        KeysAction::Providers {
            organization,
            id,
            provider,
            any,
        } => {
            let providers = (!*any).then(|| provider.clone());
            Ok(vec![json(
                &store
                    .set_providers(organization, id, providers)
                    .await
                    .map_err(failed)?,
            )?])
        }
        KeysAction::Permissions {
            organization,
            id,
            permission,
            all,
            none: _,
        } => {
            // The group requires one of the three: --none is an empty list of permissions.
            let permissions = if *all {
                Permissions::ALL
            } else {
                Permissions::of(permission.iter().copied())
            };
            Ok(vec![json(
                &store
                    .set_permissions(organization, id, permissions)
                    .await
                    .map_err(failed)?,
            )?])
        }
        KeysAction::Restrict {
            organization,
            id,
            allow_ip,
        } => Ok(vec![json(
            &store
                .restrict(organization, id, allowed_ips(allow_ip)?)
                .await
                .map_err(failed)?,
        )?]),
        KeysAction::Usage {
            organization,
            id,
            from,
            to,
            granularity,
        } => {
            use partner_api::store::{UsageGranularity, UsagePeriod, UsageStore};
            use partner_api::Timestamp;
            let instant = |flag: &str, text: &str| {
                text.parse::<Timestamp>()
                    .map_err(|_| format!("--{flag} {text:?} is not an RFC 3339 date-time"))
            };
            let to = match to {
                Some(text) => instant("to", text)?,
                None => Timestamp::now(),
            };
            let from = match from {
                Some(text) => instant("from", text)?,
                None => Timestamp::from_unix_millis(
                    to.as_datetime().timestamp_millis()
                        - partner_api::management::DEFAULT_USAGE_PERIOD.as_millis() as i64,
                )
                .ok_or("--to is too early")?,
            };
            if to.duration_since(from).is_none_or(|span| span.is_zero()) {
                return Err("--from must be before --to".into());
            }
            let granularity = if granularity == "hour" {
                UsageGranularity::Hour
            } else {
                UsageGranularity::Day
            };
            store
                .key_usage(organization, id, UsagePeriod { from, to }, granularity)
                .await
                .map_err(failed)?
                .iter()
                .map(|bucket| serde_json::to_string(bucket).map_err(|err| err.to_string()))
                .collect()
        }
        KeysAction::DeprecatedCalls { organization } => {
            use partner_api::store::{DeprecatedCallStore, DEPRECATED_CALLS_PERIOD};
            use partner_api::Timestamp;
            let now = Timestamp::now().as_datetime().timestamp_millis();
            let since = Timestamp::from_unix_millis(
                now - i64::try_from(DEPRECATED_CALLS_PERIOD.as_millis()).unwrap_or(0),
            )
            .ok_or("the clock is too early")?;
            store
                .deprecated_calls(organization, None, since)
                .await
                .map_err(failed)?
                .iter()
                .map(|total| serde_json::to_string(total).map_err(|err| err.to_string()))
                .collect()
        }
        KeysAction::Invalidate => {
            partner_api::cache::postgres::invalidate_all(store.pool())
                .await
                .map_err(failed)?;
            Ok(vec![r#"{"invalidated":"all"}"#.to_owned()])
        }
        KeysAction::Roll {
            organization,
            id,
            overlap,
            expires_in,
        } => {
            let mut roll = RollKey::new(Duration::from_secs(*overlap));
            if let Some(seconds) = expires_in {
                roll = roll.with_expires_in(Duration::from_secs(*seconds));
            }
            shown(store.roll(organization, id, roll).await.map_err(failed)?)
        }
        KeysAction::Policy {
            organization,
            max_lifetime,
            no_max_lifetime,
            max_active_keys,
            max_webhook_endpoints,
            default_api_version,
            newest_by_default,
        } => {
            let mut policy = store.key_policy(organization).await.map_err(failed)?;
            let changed = max_lifetime.is_some()
                || *no_max_lifetime
                || max_active_keys.is_some()
                || max_webhook_endpoints.is_some()
                || default_api_version.is_some()
                || *newest_by_default;
            if default_api_version.is_some() || *newest_by_default {
                policy = policy.with_default_api_version(*default_api_version);
            }
            if let Some(seconds) = max_lifetime {
                policy = policy.with_max_lifetime(Some(Duration::from_secs(*seconds)));
            }
            if *no_max_lifetime {
                policy = policy.with_max_lifetime(None);
            }
            if let Some(max) = max_active_keys {
                policy = policy.with_max_active_keys(*max);
            }
            if let Some(max) = max_webhook_endpoints {
                policy = policy.with_max_webhook_endpoints(*max);
            }
            if changed {
                policy = store
                    .set_key_policy(organization, policy)
                    .await
                    .map_err(failed)?;
            }
            Ok(vec![
                serde_json::to_string(&policy).map_err(|err| err.to_string())?
            ])
        }
    }
}

/// The ranges of the `--allow-ip` flags: none for any address.
#[cfg(feature = "postgres")]
fn allowed_ips(ranges: &[ipnet::IpNet]) -> Result<partner_api::key::AllowedIps, String> {
    partner_api::key::AllowedIps::new(ranges.iter().copied()).map_err(|err| err.to_string())
}
