//! Webhooks in the standalone host: the `webhooks` subcommand, and the delivery worker every
//! replica on a database runs unless `--no-webhooks`.

use std::process::ExitCode;
use std::time::Duration;

use partner_api::webhooks::{
    DeliveryConfig, DestinationPolicy, Dispatcher, NewEndpoint, WebhookManager,
};

use crate::cli::{Args, WebhooksAction};

/// The delivery configuration the flags give.
pub(crate) fn config(args: &Args) -> DeliveryConfig {
    let mut destinations = DestinationPolicy::new().with_allow_http(args.webhook_allow_http);
    for subnet in &args.webhook_allow_subnets {
        destinations = destinations.with_allowed_subnet(*subnet);
    }
    let concurrency = usize::try_from(args.webhook_concurrency).unwrap_or(usize::MAX);
    let mut config = DeliveryConfig::new().with_concurrency(concurrency, 4);
    if let Some(per_organization) = args.webhook_per_organization {
        config = config.with_per_organization(usize::try_from(per_organization).unwrap_or(1));
    }
    if let Some(failing_share) = args.webhook_failing_share {
        config = config.with_failing_share(usize::try_from(failing_share).unwrap_or(1));
    }
    config
        .with_retry_schedule(
            args.webhook_retry_schedule
                .0
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
        )
        .with_timeout(Duration::from_secs(args.webhook_timeout))
        .with_failing_timeout(Duration::from_secs(args.webhook_failing_timeout))
        .with_disable_after(Duration::from_secs(args.webhook_disable_after))
        .with_destinations(destinations)
}

/// How long webhook messages are kept, when this replica delivers them (the role that
/// delivers may delete them; the serving one may not): `None` for ever, or not delivering.
pub(crate) fn retention(args: &Args) -> Option<Duration> {
    (!args.no_webhooks && args.webhook_retention_days > 0)
        .then(|| Duration::from_secs(args.webhook_retention_days.saturating_mul(24 * 3600)))
}

/// A running delivery worker, stopped by [`Worker::stop`].
pub(crate) struct Worker {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Worker {
    /// Starts delivering from `store`'s outbox; a disabled endpoint is logged at WARN.
    pub(crate) fn start(store: partner_api::PgStore, args: &Args) -> Self {
        let dispatcher = Dispatcher::new(store, config(args)).with_on_disabled(|disabled| {
            tracing::warn!(
                endpoint_id = %disabled.endpoint.id,
                organization_id = %disabled.endpoint.organization_id,
                url = %disabled.endpoint.url,
                reason = disabled.reason.as_str(),
                "webhook endpoint disabled; tell its organization"
            );
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(dispatcher.run(async move {
            let _ = stopped.await;
        }));
        tracing::info!("delivering webhooks");
        Self { stop, task }
    }

    /// Stops claiming and waits for the attempts in flight.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Runs `action` and returns the exit code: 0, or 1 with a message on standard error.
pub(crate) async fn run(args: &Args, action: &WebhooksAction) -> ExitCode {
    crate::keys::print(execute(args, action).await)
}

fn json(value: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string(value).map_err(|err| err.to_string())
}

async fn execute(args: &Args, action: &WebhooksAction) -> Result<Vec<String>, String> {
    let (store, failed) = crate::stores::command_database(args, "webhooks").await?;
    Ok(match action {
        WebhooksAction::Add {
            organization,
            url,
            events,
            description,
            api_version,
            provider,
        } => {
            let mut new = NewEndpoint::new(url.clone())
                .with_events(events.iter().copied())
                .with_description(description.clone());
            if !provider.is_empty() {
                new = new.with_providers(provider);
            }
            let default = crate::commands::default_api_version(&store, organization).await;
            if let Some(version) = api_version.or(default) {
                new = new.with_api_version(version);
            }
            vec![json(
                &store
                    .add_endpoint(organization, new)
                    .await
                    .map_err(failed)?,
            )?]
        }
        WebhooksAction::Pin {
            endpoint,
            api_version,
        } => {
            let record = store
                .pin_api_version(&endpoint.organization, &endpoint.id, *api_version)
                .await
                .map_err(failed)?;
            vec![json(&record)?]
        }
        WebhooksAction::List { organization } => store
            .endpoints(organization)
            .await
            .map_err(failed)?
            .iter()
            .map(json)
            .collect::<Result<_, _>>()?,
        WebhooksAction::Rotate { endpoint, overlap } => {
            let rotated = store
                .rotate_secret(
                    &endpoint.organization,
                    &endpoint.id,
                    Duration::from_secs(*overlap),
                )
                .await
                .map_err(failed)?;
            vec![json(&rotated)?]
        }
        WebhooksAction::Enable(endpoint) | WebhooksAction::Disable(endpoint) => {
            let enabled = matches!(action, WebhooksAction::Enable(_));
            let record = store
                .set_enabled(&endpoint.organization, &endpoint.id, enabled)
                .await
                .map_err(failed)?;
            vec![json(&record)?]
        }
        WebhooksAction::Remove(endpoint) => {
            store
                .remove_endpoint(&endpoint.organization, &endpoint.id)
                .await
                .map_err(failed)?;
            vec![json(&serde_json::json!({ "removed": endpoint.id }))?]
        }
        WebhooksAction::Test(endpoint) => {
            let message_id = store
                .send_test(&endpoint.organization, &endpoint.id)
                .await
                .map_err(failed)?;
            vec![json(&serde_json::json!({ "messageId": message_id }))?]
        }
        WebhooksAction::Attempts(endpoint) => store
            .attempts(&endpoint.organization, &endpoint.id, 1000)
            .await
            .map_err(failed)?
            .iter()
            .map(json)
            .collect::<Result<_, _>>()?,
        WebhooksAction::Recover { endpoint, since } => {
            let recovered = store
                .recover(&endpoint.organization, &endpoint.id, *since)
                .await
                .map_err(failed)?;
            vec![json(&serde_json::json!({ "recovered": recovered }))?]
        }
    })
}
