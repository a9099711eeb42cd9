//! The `audit` subcommand: an organization's audit log as JSON lines, newest first, and its
//! retention (with the owner's role).

use std::process::ExitCode;

use crate::cli::{Args, AuditArgs};

/// Runs the command and returns the exit code: 0, or 1 with a message on standard error.
pub(crate) async fn run(args: &Args, audit: &AuditArgs) -> ExitCode {
    crate::keys::print(execute(args, audit).await)
}

#[cfg(not(feature = "postgres"))]
async fn execute(_args: &Args, _audit: &AuditArgs) -> Result<Vec<String>, String> {
    Err(crate::stores::no_database_support("audit"))
}

#[cfg(feature = "postgres")]
async fn execute(args: &Args, audit: &AuditArgs) -> Result<Vec<String>, String> {
    use std::time::Duration;

    use partner_api::store::{AuditLog, AuditPosition, AuditQuery, MAX_AUDIT_PAGE};

    let (store, failed) = crate::stores::command_database(args, "audit").await?;
    if audit.prune {
        let retention = Duration::from_secs(audit.retention_days.saturating_mul(24 * 3600));
        let deleted = partner_api::store::prune_audit_batches(&store, retention, 500, u32::MAX)
            .await
            .map_err(failed)?;
        return Ok(vec![format!(r#"{{"deleted":{deleted}}}"#)]);
    }
    let organization = audit.organization.as_deref().unwrap_or_default();
    let action = audit
        .action
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(|_| "--action is an action's name, such as key.revoked".to_owned())?;
    let mut lines = Vec::new();
    let mut after: Option<AuditPosition> = None;
    let wanted = usize::try_from(audit.limit).unwrap_or(usize::MAX);
    while lines.len() < wanted {
        let query = AuditQuery {
            limit: (wanted - lines.len()).min(MAX_AUDIT_PAGE),
            after: after.take(),
            action: action.clone(),
            target: audit.target.clone(),
        };
        let page = store
            .audit_entries(organization, &query)
            .await
            .map_err(failed)?;
        for entry in &page.entries {
            lines.push(serde_json::to_string(entry).map_err(|err| err.to_string())?);
        }
        after = page.next_position();
        if after.is_none() {
            break;
        }
    }
    Ok(lines)
}
