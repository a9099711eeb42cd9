//! [`AuditLog`] over PostgreSQL: each entry inserted in the transaction of its change
//! ([`audited`]), pages by keyset on `(at, id)`, retention by the database's clock.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::timestamp::PgTimestamp;
use super::{column, store_error, PgStore};
use crate::store::audit::refuse_host_entry;
use crate::store::StoreError;
use crate::store::{
    AuditContext, AuditEntry, AuditLog, AuditPage, AuditQuery, AuditRecord, MAX_AUDIT_PAGE,
};

/// Inserts the entry of a change on `connection`, which holds the change's transaction: the
/// two commit together.
pub(super) async fn audited(
    connection: &mut PgConnection,
    record: AuditRecord,
) -> Result<(), StoreError> {
    let context = AuditContext::current();
    sqlx::query(
        "INSERT INTO partner_api_audit_log \
           (organization_id, action, target, detail, actor, source_address, user_agent, \
            request_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&record.organization_id)
    .bind(record.action.as_str())
    .bind(&record.target)
    .bind(&record.detail)
    .bind(context.actor())
    .bind(context.source_address())
    .bind(context.user_agent())
    .bind(context.request_id())
    .execute(connection)
    .await
    .map_err(store_error)?;
    Ok(())
}

fn entry_from_row(row: &PgRow) -> Result<AuditEntry, StoreError> {
    let text = |name: &str| -> Result<Option<String>, StoreError> {
        row.try_get(name).map_err(store_error)
    };
    Ok(AuditEntry {
        id: column::<i64>(row, "id")?.to_string(),
        at: column::<PgTimestamp>(row, "at")?.0,
        organization_id: column(row, "organization_id")?,
        action: column::<String>(row, "action")?.parse()?,
        target: text("target")?,
        detail: text("detail")?,
        actor: column(row, "actor")?,
        source_address: text("source_address")?,
        user_agent: text("user_agent")?,
        request_id: text("request_id")?,
    })
}

#[async_trait]
impl AuditLog for PgStore {
    async fn audit_entries(
        &self,
        organization_id: &str,
        query: &AuditQuery,
    ) -> Result<AuditPage, StoreError> {
        self.check_organization(organization_id).await?;
        let limit = query.limit.clamp(1, MAX_AUDIT_PAGE);
        let (after_at, after_id) = match &query.after {
            Some(after) => (
                Some(after.at.as_datetime()),
                Some(after.id.parse::<i64>().unwrap_or(i64::MAX)),
            ),
            None => (None, None),
        };
        let rows = sqlx::query(
            "SELECT id, at, organization_id, action, target, detail, actor, source_address, \
                    user_agent, request_id \
             FROM partner_api_audit_log \
             WHERE organization_id = $1 \
               AND ($2::timestamptz IS NULL OR (at, id) < ($2, $3)) \
               AND ($4::text IS NULL OR action = $4) \
               AND ($5::text IS NULL OR target = $5) \
             ORDER BY at DESC, id DESC LIMIT $6",
        )
        .bind(organization_id)
        .bind(after_at)
        .bind(after_id)
        .bind(query.action.as_ref().map(|action| action.as_str()))
        .bind(query.target.as_deref())
        .bind(i64::try_from(limit + 1).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        let more = rows.len() > limit;
        let entries = rows
            .iter()
            .take(limit)
            .map(entry_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AuditPage { entries, more })
    }

    async fn append(&self, record: AuditRecord) -> Result<(), StoreError> {
        if let Some(refused) = refuse_host_entry(&record, &AuditContext::current()) {
            return Err(refused);
        }
        self.check_organization(&record.organization_id).await?;
        let mut connection = self.pool.acquire().await.map_err(store_error)?;
        audited(&mut connection, record).await
    }

    async fn prune_audit(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let context = AuditContext::current();
        let deleted: i64 =
            sqlx::query_scalar("SELECT partner_api_prune_audit($1, $2, $3, $4, $5, $6)")
                .bind(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX))
                .bind(i32::try_from(batch).unwrap_or(i32::MAX))
                .bind(context.actor())
                .bind(context.source_address())
                .bind(context.user_agent())
                .bind(context.request_id())
                .fetch_one(&self.pool)
                .await
                .map_err(store_error)?;
        Ok(deleted.unsigned_abs())
    }
}
