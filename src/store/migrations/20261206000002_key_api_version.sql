-- Each key's API version (#57): what a request without a version header is answered at.
-- NULL is the first version (2026-11-27), the API's shape before versions: every key that
-- exists when this runs keeps reading exactly what it read. An upgrade can be rolled back for
-- 72 hours, to the version it replaced.
ALTER TABLE partner_api_keys
    ADD COLUMN api_version DATE,
    ADD COLUMN api_version_rollback_to DATE,
    ADD COLUMN api_version_rollback_until TIMESTAMPTZ(3),
    ADD CONSTRAINT partner_api_keys_api_version_rollback
        CHECK ((api_version_rollback_to IS NULL) = (api_version_rollback_until IS NULL));

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- A key's version is part of what the caches hold of it: a change of it is a change.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_updated_keys() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_api_keys'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            PERFORM %1$I.partner_api_notify_key_ids(ARRAY(
                SELECT DISTINCT id::text FROM (
                    (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version
                       FROM old_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version
                       FROM new_keys)
                    UNION ALL
                    (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version
                       FROM new_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version
                       FROM old_keys)
                ) changed));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
