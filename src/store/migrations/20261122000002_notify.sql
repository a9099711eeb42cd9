-- Change notifications for the caches of every replica: a trigger on each table sends what
-- changed, however it was changed (through the crate, its `keys` command, or plain SQL).

-- partner_api_keys: the key's id, when a cache could hold something else than the table now
-- says (a last use or a new label is not worth a message).
CREATE FUNCTION partner_api_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND NEW.revoked_at IS NOT DISTINCT FROM OLD.revoked_at
       AND NEW.expires_at IS NOT DISTINCT FROM OLD.expires_at
       AND NEW.organization_id IS NOT DISTINCT FROM OLD.organization_id
       AND NEW.key_sha256 IS NOT DISTINCT FROM OLD.key_sha256 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('partner_api_keys', OLD.id::text);
    ELSE
        PERFORM pg_notify('partner_api_keys', NEW.id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER partner_api_keys_notify
    AFTER INSERT OR UPDATE OR DELETE ON partner_api_keys
    FOR EACH ROW EXECUTE FUNCTION partner_api_notify_key();

-- Anything may have changed: a truncated table, or an organization renamed (its name is part
-- of what a cached key resolves to).
CREATE FUNCTION partner_api_notify_all_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('partner_api_keys', '*');
    RETURN NULL;
END
$$;
CREATE TRIGGER partner_api_keys_notify_truncate
    AFTER TRUNCATE ON partner_api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_all_keys();
CREATE TRIGGER partner_organizations_notify
    AFTER UPDATE OR DELETE OR TRUNCATE ON partner_organizations
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_all_keys();

-- partner_orders: the organization whose page changed. A host whose orders live in its own
-- tables adds the same trigger there (see the README, "Running many replicas").
CREATE FUNCTION partner_api_notify_orders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify('partner_api_orders', OLD.organization_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_notify('partner_api_orders', NEW.organization_id);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER partner_orders_notify
    AFTER INSERT OR UPDATE OR DELETE ON partner_orders
    FOR EACH ROW EXECUTE FUNCTION partner_api_notify_orders();

CREATE FUNCTION partner_api_notify_all_orders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('partner_api_orders', '*');
    RETURN NULL;
END
$$;
CREATE TRIGGER partner_orders_notify_truncate
    AFTER TRUNCATE ON partner_orders
    FOR EACH STATEMENT EXECUTE FUNCTION partner_api_notify_all_orders();
