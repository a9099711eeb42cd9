//! [`KeyManager`] over PostgreSQL: every statement scoped to the organization, expiry and
//! revocation by the database's clock, last uses in one statement per batch.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::audit::audited;
use super::key_rows::{
    lifetime_millis, parse_id, range_texts, record_from_row, unknown_key, RECORD,
};
use super::policy::{locked_policy, read_policy};
use super::{column, store_error, PgStore};
use crate::key::KeyDigest;
use crate::key::{
    canonical_providers, AllowedIps, ApiKey, KeyEnvironment, Permission, Permissions,
};
use crate::model::Timestamp;
use crate::store::audit::restriction;
use crate::store::key_manager::{
    no_rollback, permissions_detail, providers_detail, version_change,
};
use crate::store::StoreError;
use crate::store::{AuditAction, AuditContext, AuditRecord};
use crate::store::{
    IssuedKey, KeyAbility, KeyManager, KeyPolicy, KeyRecord, KeyRefusal, KeyUse, LeakReport,
    LeakedKey, NewKey, RollKey,
};
use crate::versions::ApiVersion;

/// The active keys of the organization `$1`, by the database's clock.
const ACTIVE_KEYS: &str = "SELECT count(*) FROM partner_api_keys WHERE organization_id = $1 \
                           AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())";

#[async_trait]
impl KeyManager for PgStore {
    fn supports(&self, _ability: KeyAbility) -> bool {
        true
    }

    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        // The database's clock decides expiry; this only refuses what is plainly past.
        let now = Timestamp::now();
        new.check(now)?;
        let key = ApiKey::generate(new.environment()).map_err(StoreError::other)?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let policy =
            locked_policy(&mut transaction, &self.statements.policy, organization_id).await?;
        let lifetime = new.lifetime_at(now);
        policy.check_lifetime(lifetime)?;
        policy.check_active_keys(active_keys(&mut transaction, organization_id).await?, 0)?;
        let row = sqlx::query(&format!(
            "INSERT INTO partner_api_keys \
               (organization_id, key_sha256, label, hint, environment, expires_at, lifetime_ms, \
                allowed_ips, api_version, permissions, providers) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text[]::cidr[], $9, $10, $11) \
             RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(&key.digest().as_bytes()[..])
        .bind(new.label())
        .bind(key.hint())
        .bind(new.environment().name())
        .bind(new.expires_at().map(|at| at.as_datetime()))
        .bind(lifetime.map(lifetime_millis))
        .bind(range_texts(new.allowed_ips()))
        .bind(new.api_version().date())
        .bind(permission_names(new.permissions()))
        .bind(new.canonical_providers())
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        let record = record_from_row(&row)?;
        let entry = AuditRecord::new(organization_id, AuditAction::KeyIssued, Some(&record.id));
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        Ok(IssuedKey::new(key, record))
    }

    async fn list(&self, organization_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let known: bool = sqlx::query_scalar(&self.statements.organization_exists)
            .bind(organization_id)
            .fetch_one(&mut *transaction)
            .await
            .map_err(store_error)?;
        if !known {
            return Err(StoreError::not_found(format!(
                "unknown organization {organization_id:?}"
            )));
        }
        let rows = sqlx::query(&format!(
            "SELECT {RECORD} FROM partner_api_keys WHERE organization_id = $1 \
             ORDER BY created_at DESC, id DESC"
        ))
        .bind(organization_id)
        .fetch_all(&mut *transaction)
        .await
        .map_err(store_error)?;
        rows.iter().map(record_from_row).collect()
    }

    async fn get(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        let sql =
            format!("SELECT {RECORD} FROM partner_api_keys WHERE organization_id = $1 AND id = $2");
        self.one_record(&sql, organization_id, key_id).await
    }

    async fn revoke(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        let id = parse_id(key_id)?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // Whether this call revokes the key (the entry is for the revocation, not a repeat).
        let active: Option<bool> = sqlx::query_scalar(
            "SELECT revoked_at IS NULL FROM partner_api_keys \
             WHERE organization_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(organization_id)
        .bind(id)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let active = active.ok_or_else(|| unknown_key(key_id))?;
        let row = sqlx::query(&format!(
            "UPDATE partner_api_keys SET revoked_at = COALESCE(revoked_at, now()), \
               revoked_reason = CASE WHEN revoked_at IS NULL THEN 'manual' ELSE revoked_reason END \
             WHERE organization_id = $1 AND id = $2 RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(id)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        if active {
            let entry = AuditRecord::new(organization_id, AuditAction::KeyRevoked, Some(key_id));
            audited(&mut transaction, entry).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        record_from_row(&row)
    }

    async fn restrict(
        &self,
        organization_id: &str,
        key_id: &str,
        allowed_ips: AllowedIps,
    ) -> Result<KeyRecord, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let row = sqlx::query(&format!(
            "UPDATE partner_api_keys k SET allowed_ips = $3::text[]::cidr[] \
             FROM (SELECT id AS key_id, allowed_ips AS before FROM partner_api_keys \
                   WHERE organization_id = $1 AND id = $2 FOR UPDATE) old \
             WHERE k.id = old.key_id \
             RETURNING {RECORD}, old.before IS DISTINCT FROM k.allowed_ips AS changed"
        ))
        .bind(organization_id)
        .bind(parse_id(key_id)?)
        .bind(range_texts(&allowed_ips))
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?
        .ok_or_else(|| unknown_key(key_id))?;
        // A change that changes nothing writes no entry.
        if column::<bool>(&row, "changed")? {
            let entry = AuditRecord::new(organization_id, AuditAction::KeyRestricted, Some(key_id))
                .with_detail(restriction(&allowed_ips));
            audited(&mut transaction, entry).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        record_from_row(&row)
    }

    async fn set_permissions(
        &self,
        organization_id: &str,
        key_id: &str,
        permissions: Permissions,
    ) -> Result<KeyRecord, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let row = sqlx::query(&format!(
            "UPDATE partner_api_keys SET permissions = $3 \
             WHERE organization_id = $1 AND id = $2 AND permissions IS DISTINCT FROM $3 \
             RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(parse_id(key_id)?)
        .bind(permission_names(permissions))
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let entry = AuditRecord::new(
            organization_id,
            AuditAction::KeyPermissionsChanged,
            Some(key_id),
        )
        .with_detail(permissions_detail(permissions));
        self.after_change(transaction, row, organization_id, key_id, entry)
            .await
    }

    async fn set_providers(
        &self,
        organization_id: &str,
        key_id: &str,
        providers: Option<Vec<String>>,
    ) -> Result<KeyRecord, StoreError> {
        let providers = providers
            .map(|providers| {
                canonical_providers(&providers).map_err(|message| {
                    StoreError::refusal(crate::store::StoreErrorKind::InvalidData, message)
                })
            })
            .transpose()?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let row = sqlx::query(&format!(
            "UPDATE partner_api_keys SET providers = $3 \
             WHERE organization_id = $1 AND id = $2 AND providers IS DISTINCT FROM $3 \
             RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(parse_id(key_id)?)
        .bind(&providers)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let entry = AuditRecord::new(
            organization_id,
            AuditAction::KeyProvidersChanged,
            Some(key_id),
        )
        .with_detail(providers_detail(providers.as_deref()));
        self.after_change(transaction, row, organization_id, key_id, entry)
            .await
    }

    async fn pin_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
        version: ApiVersion,
    ) -> Result<KeyRecord, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let before = locked_api_version(&mut transaction, organization_id, key_id).await?;
        let row = sqlx::query(&format!(
            "UPDATE partner_api_keys SET api_version = $3, \
               api_version_rollback_to = CASE WHEN $3 > $4 THEN $4 END, \
               api_version_rollback_until = CASE WHEN $3 > $4 \
                 THEN now() + interval '72 hours' END \
             WHERE organization_id = $1 AND id = $2 AND $3 <> $4 \
             RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(parse_id(key_id)?)
        .bind(version.date())
        .bind(before.0.date())
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let entry = AuditRecord::new(
            organization_id,
            AuditAction::KeyApiVersionPinned,
            Some(key_id),
        )
        .with_detail(version_change(before.0, version));
        self.after_change(transaction, row, organization_id, key_id, entry)
            .await
    }

    async fn roll_back_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
    ) -> Result<KeyRecord, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let (before, rollback) =
            locked_api_version(&mut transaction, organization_id, key_id).await?;
        let Some(to) = rollback else {
            return Err(no_rollback(key_id));
        };
        let row = sqlx::query(&format!(
            "UPDATE partner_api_keys SET api_version = api_version_rollback_to, \
               api_version_rollback_to = NULL, api_version_rollback_until = NULL \
             WHERE organization_id = $1 AND id = $2 RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(parse_id(key_id)?)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        let entry = AuditRecord::new(
            organization_id,
            AuditAction::KeyApiVersionRolledBack,
            Some(key_id),
        )
        .with_detail(version_change(before, to));
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        record_from_row(&row)
    }

    async fn revoke_leaked(
        &self,
        reports: &[LeakReport],
    ) -> Result<Vec<Option<LeakedKey>>, StoreError> {
        if reports.is_empty() {
            return Ok(Vec::new());
        }
        // One statement for the whole report, whatever its size: the first report of each
        // digest counts, and a key keeps its first revocation and its first leak. Rows are
        // locked in id order, so two reports of the same keys at once wait, never deadlock.
        // The entries are written by a trigger (`partner_api_audit_key_leaked`, as the owner,
        // with the actor `github secret scanning`) in the statement's transaction, so with
        // the revocations; the context's source, agent and request id reach it as
        // transaction-local settings.
        let context = AuditContext::current();
        let mut seen = std::collections::HashSet::new();
        let firsts: Vec<&LeakReport> = reports
            .iter()
            .filter(|report| seen.insert(report.digest))
            .collect();
        let digests: Vec<&[u8]> = firsts.iter().map(|r| &r.digest.as_bytes()[..]).collect();
        let urls: Vec<&str> = firsts.iter().map(|r| r.leak.url.as_str()).collect();
        let sources: Vec<&str> = firsts.iter().map(|r| r.leak.source.as_str()).collect();
        let times: Vec<DateTime<Utc>> = firsts
            .iter()
            .map(|r| r.leak.reported_at.as_datetime())
            .collect();
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        sqlx::query(
            "SELECT set_config('partner_api.audit_source_address', coalesce($1, ''), true), \
                    set_config('partner_api.audit_user_agent', coalesce($2, ''), true), \
                    set_config('partner_api.audit_request_id', coalesce($3, ''), true)",
        )
        .bind(context.source_address())
        .bind(context.user_agent())
        .bind(context.request_id())
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
        let rows = sqlx::query(&format!(
            "WITH reports AS ( \
               SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::timestamptz[]) \
                 AS r(digest, url, source, reported_at)), \
             before AS ( \
               SELECT k.id, k.leak_reported_at IS NULL AS first_report \
               FROM partner_api_keys k JOIN reports r ON k.key_sha256 = r.digest \
               ORDER BY k.id FOR UPDATE OF k), \
             updated AS ( \
             UPDATE partner_api_keys k SET \
               revoked_at = COALESCE(k.revoked_at, now()), \
               revoked_reason = CASE WHEN k.revoked_at IS NULL THEN 'leaked' \
                                ELSE k.revoked_reason END, \
               leak_url = COALESCE(k.leak_url, r.url), \
               leak_source = COALESCE(k.leak_source, r.source), \
               leak_reported_at = COALESCE(k.leak_reported_at, r.reported_at) \
             FROM reports r, before b \
             WHERE k.key_sha256 = r.digest AND b.id = k.id \
             RETURNING k.*, b.first_report) \
             SELECT {RECORD}, key_sha256, first_report FROM updated"
        ))
        .bind(&digests)
        .bind(&urls)
        .bind(&sources)
        .bind(&times)
        .fetch_all(&mut *transaction)
        .await
        .map_err(store_error)?;
        transaction.commit().await.map_err(store_error)?;
        let mut found = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let digest: Vec<u8> = column(row, "key_sha256")?;
            let first_report: bool = column(row, "first_report")?;
            let digest = <[u8; 32]>::try_from(digest.as_slice())
                .map_err(|_| StoreError::invalid_data("a key digest is not 32 bytes"))?;
            found.insert(
                KeyDigest::from_bytes(digest),
                (record_from_row(row)?, first_report),
            );
        }
        // Later reports of a digest in the same message are replays of its first.
        let mut told = std::collections::HashSet::new();
        Ok(reports
            .iter()
            .map(|report| {
                let (record, first_report) = found.get(&report.digest)?;
                let first_report = *first_report && told.insert(report.digest);
                Some(LeakedKey::new(record.clone(), first_report))
            })
            .collect())
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        roll: RollKey,
    ) -> Result<IssuedKey, StoreError> {
        let id = parse_id(key_id)?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let policy =
            locked_policy(&mut transaction, &self.statements.policy, organization_id).await?;
        // Locks the old key, so two rolls of one key make one new key each, in turn.
        let old = sqlx::query(&format!(
            "SELECT {RECORD}, COALESCE(expires_at <= now(), false) AS expired \
             FROM partner_api_keys WHERE organization_id = $1 AND id = $2 FOR UPDATE"
        ))
        .bind(organization_id)
        .bind(id)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?
        .ok_or_else(|| unknown_key(key_id))?;
        let expired: bool = old.try_get("expired").map_err(store_error)?;
        let old = record_from_row(&old)?;
        if old.revoked_at.is_some() {
            return Err(KeyRefusal::conflict("a revoked key cannot be rolled"));
        }
        if expired {
            return Err(KeyRefusal::conflict("an expired key cannot be rolled"));
        }
        let lifetime = roll.expires_in().or(old.lifetime_for_roll());
        policy.check_lifetime(lifetime)?;
        policy.check_active_keys(active_keys(&mut transaction, organization_id).await?, 1)?;
        let overlap_ms = i64::try_from(roll.overlap().as_millis()).unwrap_or(i64::MAX);
        // Without overlap the old key is revoked, never expired "now": a wall clock stepped
        // back would make that expiry a future instant again (docs::keys, "Roll").
        sqlx::query(
            "UPDATE partner_api_keys SET \
               expires_at = CASE WHEN $3 = 0 THEN expires_at ELSE LEAST(expires_at, \
                 now() + LEAST($3, 3153600000000) * interval '1 millisecond') END, \
               revoked_at = CASE WHEN $3 = 0 THEN now() END, \
               revoked_reason = CASE WHEN $3 = 0 THEN 'rolled' END \
             WHERE organization_id = $1 AND id = $2",
        )
        .bind(organization_id)
        .bind(id)
        .bind(overlap_ms)
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
        let environment = old.environment.unwrap_or(KeyEnvironment::Live);
        let key = ApiKey::generate(environment).map_err(StoreError::other)?;
        let lifetime_ms = lifetime.map(lifetime_millis);
        let row = sqlx::query(&format!(
            "INSERT INTO partner_api_keys \
               (organization_id, key_sha256, label, hint, environment, expires_at, lifetime_ms, \
                allowed_ips, api_version, permissions, providers) \
             VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond', $6, \
                     $7::text[]::cidr[], $8, $9, $10) \
             RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(&key.digest().as_bytes()[..])
        .bind(&old.label)
        .bind(key.hint())
        .bind(environment.name())
        .bind(lifetime_ms)
        .bind(range_texts(&old.allowed_ips))
        .bind(old.api_version.map(|version| version.date()))
        .bind(permission_names(old.permissions))
        .bind(&old.providers)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        let record = record_from_row(&row)?;
        let entry = AuditRecord::new(organization_id, AuditAction::KeyRolled, Some(key_id))
            .with_detail(record.id.clone());
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        Ok(IssuedKey::new(key, record))
    }

    async fn key_policy(&self, organization_id: &str) -> Result<KeyPolicy, StoreError> {
        let mut connection = self.pool.acquire().await.map_err(store_error)?;
        read_policy(&mut connection, &self.statements.policy, organization_id).await
    }

    async fn set_key_policy(
        &self,
        organization_id: &str,
        policy: KeyPolicy,
    ) -> Result<KeyPolicy, StoreError> {
        let max_lifetime_ms = policy.max_lifetime.map(|lifetime| {
            i64::try_from(lifetime.as_millis())
                .unwrap_or(i64::MAX)
                .max(1)
        });
        let max_active_keys = i32::try_from(policy.max_active_keys).unwrap_or(i32::MAX);
        let max_webhook_endpoints = i32::try_from(policy.max_webhook_endpoints).unwrap_or(i32::MAX);
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // Under the organization's issue lock, so a concurrent setting cannot slip between
        // the read and the write and make a change look like none.
        let before =
            locked_policy(&mut transaction, &self.statements.policy, organization_id).await;
        sqlx::query(
            "INSERT INTO partner_api_key_policies \
               (organization_id, max_lifetime_ms, max_active_keys, max_webhook_endpoints, \
                default_api_version) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (organization_id) DO UPDATE \
             SET max_lifetime_ms = EXCLUDED.max_lifetime_ms, \
                 max_active_keys = EXCLUDED.max_active_keys, \
                 max_webhook_endpoints = EXCLUDED.max_webhook_endpoints, \
                 default_api_version = EXCLUDED.default_api_version",
        )
        .bind(organization_id)
        .bind(max_lifetime_ms)
        .bind(max_active_keys)
        .bind(max_webhook_endpoints)
        .bind(policy.default_api_version.map(ApiVersion::date))
        .execute(&mut *transaction)
        .await
        .map_err(|err| unknown_organization(store_error(err), organization_id))?;
        let set = read_policy(&mut transaction, &self.statements.policy, organization_id).await?;
        // A change that changes nothing writes no entry.
        if before.ok() != Some(set) {
            let entry = AuditRecord::new(organization_id, AuditAction::PolicyChanged, None)
                .with_detail(serde_json::to_string(&set).map_err(StoreError::other)?);
            audited(&mut transaction, entry).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        Ok(set)
    }

    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        let (ids, times): (Vec<i64>, Vec<DateTime<Utc>>) = uses
            .iter()
            .filter_map(|KeyUse { key_id, at }| {
                Some((key_id.parse::<i64>().ok()?, at.as_datetime()))
            })
            .unzip();
        if ids.is_empty() {
            return Ok(());
        }
        // One statement per batch; a key used twice in it counts its latest use.
        sqlx::query(
            "UPDATE partner_api_keys k SET last_used_at = GREATEST(k.last_used_at, u.at) \
             FROM (SELECT id, max(at) AS at FROM unnest($1::bigint[], $2::timestamptz[]) \
                   AS t(id, at) GROUP BY id) u \
             WHERE k.id = u.id",
        )
        .bind(&ids)
        .bind(&times)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }
}

async fn active_keys(
    transaction: &mut sqlx::PgConnection,
    organization_id: &str,
) -> Result<u64, StoreError> {
    let active: i64 = sqlx::query_scalar(ACTIVE_KEYS)
        .bind(organization_id)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
    Ok(active.unsigned_abs())
}

impl PgStore {
    /// The record `sql` (with `$1` the organization, `$2` the key's row number) returns for
    /// the key `key_id`, or `NotFound`.
    async fn one_record(
        &self,
        sql: &str,
        organization_id: &str,
        key_id: &str,
    ) -> Result<KeyRecord, StoreError> {
        let row = sqlx::query(sql)
            .bind(organization_id)
            .bind(parse_id(key_id)?)
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        row.as_ref()
            .map(record_from_row)
            .unwrap_or_else(|| Err(unknown_key(key_id)))
    }
}

/// A foreign-key failure on insert names the organization.
fn unknown_organization(err: StoreError, organization_id: &str) -> StoreError {
    if err.kind() == crate::store::StoreErrorKind::NotFound {
        StoreError::not_found(format!("unknown organization {organization_id:?}"))
    } else {
        err
    }
}

/// The API version of the key `key_id` of `organization_id` (the first when none is
/// recorded), locked for the transaction, and the version an open rollback returns to.
async fn locked_api_version(
    transaction: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    organization_id: &str,
    key_id: &str,
) -> Result<(ApiVersion, Option<ApiVersion>), StoreError> {
    let row = sqlx::query(
        "SELECT api_version, \
           CASE WHEN api_version_rollback_until > now() THEN api_version_rollback_to END \
             AS rollback_to \
         FROM partner_api_keys WHERE organization_id = $1 AND id = $2 FOR UPDATE",
    )
    .bind(organization_id)
    .bind(parse_id(key_id)?)
    .fetch_optional(&mut **transaction)
    .await
    .map_err(store_error)?
    .ok_or_else(|| unknown_key(key_id))?;
    let version = super::keys::api_version(&row, "api_version")?.unwrap_or(crate::versions::FIRST);
    Ok((version, super::keys::api_version(&row, "rollback_to")?))
}

/// The `permissions` column of `permissions`: NULL for every one, so a key without
/// restrictions reads as every key did before permissions existed.
fn permission_names(permissions: Permissions) -> Option<Vec<&'static str>> {
    (!permissions.is_all()).then(|| permissions.iter().map(Permission::as_str).collect())
}

impl PgStore {
    /// The key's record after a change of it (`row`, the updated one): committed with the
    /// change's audit `entry`; or, for a change that changed nothing (no row), as it is, with
    /// nothing written (rule `audit-only-changes`; an unknown key is `NotFound`).
    async fn after_change(
        &self,
        mut transaction: sqlx::Transaction<'_, sqlx::Postgres>,
        row: Option<sqlx::postgres::PgRow>,
        organization_id: &str,
        key_id: &str,
        entry: AuditRecord,
    ) -> Result<KeyRecord, StoreError> {
        let Some(row) = row else {
            drop(transaction);
            return self.get(organization_id, key_id).await;
        };
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        record_from_row(&row)
    }
}
