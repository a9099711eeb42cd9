-- The providers whose orders each key may read (#58), sorted and each once (the crate writes
-- them so). NULL is every order of the key's organization: every key that exists when this
-- runs keeps reading what it read.
ALTER TABLE partner_api_keys
    ADD COLUMN providers TEXT[]
        CHECK (pg_catalog.cardinality(providers) BETWEEN 1 AND 50
               AND pg_catalog.array_position(providers, NULL) IS NULL);

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- A key's providers are part of what the caches hold of it: a change of them is a
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
                            api_version, permissions, providers
                       FROM old_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version, permissions, providers
                       FROM new_keys)
                    UNION ALL
                    (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version, permissions, providers
                       FROM new_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips,
                            api_version, permissions, providers
                       FROM old_keys)
                ) changed));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
