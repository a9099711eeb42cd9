-- Key changes are sent once per statement instead of once per row: a statement that changes
-- many keys sends their ids together (comma-separated, in payloads well under PostgreSQL's
-- 8000-byte limit), or `*` above 1000 ids, which empties every replica's key cache once
-- instead of once per key. Every column a lookup depends on counts (the id, the digest, the
-- organization, the revocation and the expiry), and both the old and the new id of a row
-- whose id changed are sent.
DROP TRIGGER partner_api_keys_notify ON partner_api_keys;
DROP FUNCTION partner_api_notify_key();

CREATE FUNCTION partner_api_notify_key_ids(changed text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    chunk text := '';
    key_id text;
BEGIN
    IF cardinality(changed) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(changed) > 1000 THEN
        PERFORM pg_notify('partner_api_keys', '*');
        RETURN;
    END IF;
    FOREACH key_id IN ARRAY changed LOOP
        IF length(chunk) + length(key_id) >= 7000 THEN
            PERFORM pg_notify('partner_api_keys', chunk);
            chunk := '';
        END IF;
        chunk := CASE WHEN chunk = '' THEN key_id ELSE chunk || ',' || key_id END;
    END LOOP;
    IF chunk <> '' THEN
        PERFORM pg_notify('partner_api_keys', chunk);
    END IF;
END
$$;

CREATE FUNCTION partner_api_notify_inserted_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM partner_api_notify_key_ids(ARRAY(SELECT DISTINCT id::text FROM new_keys));
    RETURN NULL;
END
$$;

CREATE FUNCTION partner_api_notify_deleted_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM partner_api_notify_key_ids(ARRAY(SELECT DISTINCT id::text FROM old_keys));
    RETURN NULL;
END
$$;

-- Rows whose looked-up columns differ between before and after (a last use or a new label is
-- not worth a message).
CREATE FUNCTION partner_api_notify_updated_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM partner_api_notify_key_ids(ARRAY(
        SELECT DISTINCT id::text FROM (
            (SELECT id, organization_id, key_sha256, revoked_at, expires_at FROM old_keys
             EXCEPT
             SELECT id, organization_id, key_sha256, revoked_at, expires_at FROM new_keys)
            UNION ALL
            (SELECT id, organization_id, key_sha256, revoked_at, expires_at FROM new_keys
             EXCEPT
             SELECT id, organization_id, key_sha256, revoked_at, expires_at FROM old_keys)
        ) changed));
    RETURN NULL;
END
$$;

CREATE TRIGGER partner_api_keys_notify_insert
    AFTER INSERT ON partner_api_keys REFERENCING NEW TABLE AS new_keys
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_inserted_keys();
CREATE TRIGGER partner_api_keys_notify_update
    AFTER UPDATE ON partner_api_keys REFERENCING OLD TABLE AS old_keys NEW TABLE AS new_keys
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_updated_keys();
CREATE TRIGGER partner_api_keys_notify_delete
    AFTER DELETE ON partner_api_keys REFERENCING OLD TABLE AS old_keys
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_deleted_keys();

-- An organization renamed or deleted: its name is part of what a cached key resolves to. Only
-- a real change notifies, so a seed loaded again at every start (an upsert that changes
-- nothing, which still fires statement triggers) empties no replica's caches.
DROP TRIGGER partner_organizations_notify ON partner_organizations;
CREATE FUNCTION partner_api_notify_renamed_organizations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT id, name FROM old_organizations
               EXCEPT SELECT id, name FROM new_organizations) THEN
        PERFORM pg_notify('partner_api_keys', '*');
    END IF;
    RETURN NULL;
END
$$;
CREATE FUNCTION partner_api_notify_deleted_organizations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM old_organizations) THEN
        PERFORM pg_notify('partner_api_keys', '*');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER partner_organizations_notify_update
    AFTER UPDATE ON partner_organizations
    REFERENCING OLD TABLE AS old_organizations NEW TABLE AS new_organizations
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_renamed_organizations();
CREATE TRIGGER partner_organizations_notify_delete
    AFTER DELETE ON partner_organizations REFERENCING OLD TABLE AS old_organizations
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_deleted_organizations();
CREATE TRIGGER partner_organizations_notify_truncate
    AFTER TRUNCATE ON partner_organizations
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_all_keys();
