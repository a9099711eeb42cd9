-- The routes each key may call (#58): `orders`, `events`. NULL is every permission: every key
-- that exists when this runs keeps reaching exactly what it reached.
ALTER TABLE partner_api_keys
    ADD COLUMN permissions TEXT[]
        CHECK (permissions <@ ARRAY['orders', 'events']::text[]
               AND pg_catalog.array_position(permissions, NULL) IS NULL);

-- A call refused for a permission the key lacks is counted as a refusal of its own kind.
ALTER TABLE partner_api_key_usage DROP CONSTRAINT partner_api_key_usage_outcome_check;
ALTER TABLE partner_api_key_usage
    ADD CONSTRAINT partner_api_key_usage_outcome_check
    CHECK (outcome IN ('ok', 'not_modified', 'revoked', 'expired', 'address_not_allowed',
                       'permission_missing', 'rate_limited', 'error'));

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- A key's permissions are part of what the caches hold of it: a change of them is a
    -- change.
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
                            api_version, permissions
                       FROM old_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version, permissions
                       FROM new_keys)
                    UNION ALL
                    (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version, permissions
                       FROM new_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version, permissions
                       FROM old_keys)
                ) changed));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
