-- Our functions run inside the host's database with the rights of whoever fires them (the
-- webhooks' trigger with the migrating role's), so none of them may be steered by the caller:
-- - each pins its search path to this schema with pg_temp last, names every table and
--   function of ours with this schema and every built-in function with pg_catalog, and compares
--   table ids as oids: a temporary table, view or function of the caller's, or a function in
--   a schema the caller may create in, never stands in for ours or for a built-in one;
-- - each trigger function runs only for a table it serves (raising otherwise), so attaching
--   it to a table of one's own does nothing but fail;
-- - EXECUTE is revoked from PUBLIC on the functions only our triggers call, and on the
--   SECURITY DEFINER one.
-- The bodies are written here with %1$I for this schema (the one the migration runs in).

-- The host's own tables of orders that the orders' triggers serve, besides partner_orders:
-- registered by the owner with partner_api_serve_orders_table (docs::webhooks). Readable by
-- anyone: the triggers check it as the role that writes the orders.
CREATE TABLE partner_api_order_tables (
    relid regclass PRIMARY KEY
);
GRANT SELECT ON partner_api_order_tables TO PUBLIC;
-- Host tables that already carry the orders' triggers keep working: those of the migrating
-- role (the owner). A table of another role with our triggers (before this migration any role
-- could attach them) is not registered, and named in a warning.
INSERT INTO partner_api_order_tables (relid)
    SELECT DISTINCT t.tgrelid::regclass
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE NOT t.tgisinternal AND c.relpersistence <> 't'
      AND t.tgrelid <> 'partner_orders'::regclass
      AND pg_has_role(current_user, c.relowner, 'MEMBER')
      AND t.tgfoid IN ('partner_api_log_order_change()'::regprocedure,
                       'partner_api_raise_order_events()'::regprocedure,
                       'partner_api_notify_orders()'::regprocedure,
                       'partner_api_notify_all_orders()'::regprocedure);

DO $migration$
DECLARE
    schema_name text := current_schema();
    unregistered record;
BEGIN
    -- Whether the table `rel` is one whose orders the triggers serve.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_serves_orders(rel oid) RETURNS boolean
        LANGUAGE sql STABLE SET search_path = %1$I, pg_temp AS $body$
            SELECT rel = '%1$I.partner_orders'::regclass::oid
                OR EXISTS (SELECT 1 FROM %1$I.partner_api_order_tables t WHERE t.relid::oid = rel)
        $body$
    $sql$, schema_name);

    -- The owner's way to have the crate serve a table of the host's own orders: registered,
    -- with the caches' change log trigger, and (with `webhooks`, for a table with the columns
    -- of partner_orders) the webhooks' one. Triggers of ours the table had before, whatever
    -- their names, are replaced, so nothing is logged or raised twice.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_serve_orders_table(orders regclass, webhooks boolean DEFAULT true)
        RETURNS void LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            old_trigger name;
        BEGIN
            INSERT INTO %1$I.partner_api_order_tables (relid) VALUES (orders)
                ON CONFLICT (relid) DO NOTHING;
            FOR old_trigger IN
                SELECT t.tgname FROM pg_catalog.pg_trigger t
                WHERE t.tgrelid OPERATOR(pg_catalog.=) orders::oid AND NOT t.tgisinternal
                  AND t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[
                      '%1$I.partner_api_log_order_change()'::regprocedure::oid,
                      '%1$I.partner_api_raise_order_events()'::regprocedure::oid,
                      '%1$I.partner_api_notify_orders()'::regprocedure::oid])
            LOOP
                EXECUTE pg_catalog.format('DROP TRIGGER %%I ON %%s', old_trigger, orders);
            END LOOP;
            EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_log '
                           'AFTER INSERT OR UPDATE OR DELETE ON %%s FOR EACH ROW '
                           'EXECUTE FUNCTION %1$I.partner_api_log_order_change()', orders);
            IF webhooks THEN
                EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_webhooks '
                               'AFTER INSERT OR UPDATE OR DELETE ON %%s FOR EACH ROW '
                               'EXECUTE FUNCTION %1$I.partner_api_raise_order_events()', orders);
            END IF;
        END
        $body$
    $sql$, schema_name);

    -- A trigger function that is not fired by a table it serves.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_refuse_table(trigger_name text, rel oid) RETURNS void
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            RAISE EXCEPTION 'partner_api: the trigger %% runs a function that does not serve the table %%',
                trigger_name, rel::regclass
                USING ERRCODE = 'insufficient_privilege';
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_key_ids(changed text[]) RETURNS void
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            chunk text := '';
            key_id text;
        BEGIN
            IF pg_catalog.cardinality(changed) = 0 THEN
                RETURN;
            END IF;
            IF pg_catalog.cardinality(changed) > 1000 THEN
                PERFORM pg_catalog.pg_notify('partner_api_keys', '*');
                RETURN;
            END IF;
            FOREACH key_id IN ARRAY changed LOOP
                IF pg_catalog.length(chunk) + pg_catalog.length(key_id) >= 7000 THEN
                    PERFORM pg_catalog.pg_notify('partner_api_keys', chunk);
                    chunk := '';
                END IF;
                chunk := CASE WHEN chunk = '' THEN key_id ELSE chunk || ',' || key_id END;
            END LOOP;
            IF chunk <> '' THEN
                PERFORM pg_catalog.pg_notify('partner_api_keys', chunk);
            END IF;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_inserted_keys() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_api_keys'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            PERFORM %1$I.partner_api_notify_key_ids(ARRAY(SELECT DISTINCT id::text FROM new_keys));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_deleted_keys() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_api_keys'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            PERFORM %1$I.partner_api_notify_key_ids(ARRAY(SELECT DISTINCT id::text FROM old_keys));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_updated_keys() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_api_keys'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            PERFORM %1$I.partner_api_notify_key_ids(ARRAY(
                SELECT DISTINCT id::text FROM (
                    (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
                       FROM old_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
                       FROM new_keys)
                    UNION ALL
                    (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
                       FROM new_keys
                     EXCEPT
                     SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
                       FROM old_keys)
                ) changed));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_all_keys() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_api_keys'::regclass::oid
               AND TG_RELID <> '%1$I.partner_organizations'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            PERFORM pg_catalog.pg_notify('partner_api_keys', '*');
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_renamed_organizations() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_organizations'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF EXISTS (SELECT id, name FROM old_organizations
                       EXCEPT SELECT id, name FROM new_organizations) THEN
                PERFORM pg_catalog.pg_notify('partner_api_keys', '*');
            END IF;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_deleted_organizations() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_organizations'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF EXISTS (SELECT 1 FROM old_organizations) THEN
                PERFORM pg_catalog.pg_notify('partner_api_keys', '*');
            END IF;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_orders() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF TG_OP IN ('UPDATE', 'DELETE') THEN
                PERFORM pg_catalog.pg_notify('partner_api_orders', OLD.organization_id);
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                PERFORM pg_catalog.pg_notify('partner_api_orders', NEW.organization_id);
            END IF;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_notify_all_orders() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            PERFORM pg_catalog.pg_notify('partner_api_orders', '*');
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_log_order_change() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF TG_OP IN ('UPDATE', 'DELETE') THEN
                INSERT INTO %1$I.partner_api_order_changes (organization_id)
                    VALUES (OLD.organization_id);
            END IF;
            IF TG_OP = 'INSERT'
               OR (TG_OP = 'UPDATE' AND NEW.organization_id IS DISTINCT FROM OLD.organization_id) THEN
                INSERT INTO %1$I.partner_api_order_changes (organization_id)
                    VALUES (NEW.organization_id);
            END IF;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_event(
            org text, kind text, order_key text, snapshot jsonb)
        RETURNS void LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            message bigint;
        BEGIN
            IF NOT EXISTS (
                SELECT 1 FROM %1$I.partner_webhook_endpoints e
                WHERE e.organization_id = org AND e.enabled
                  AND (pg_catalog.cardinality(e.events) = 0 OR kind = ANY (e.events))
            ) THEN
                RETURN;
            END IF;
            INSERT INTO %1$I.partner_webhook_messages (organization_id, event_type, order_id, order_row)
                VALUES (org, kind, order_key, snapshot)
                RETURNING id INTO message;
            INSERT INTO %1$I.partner_webhook_deliveries (message_id, endpoint_id, order_id)
                SELECT message, e.id, order_key FROM %1$I.partner_webhook_endpoints e
                WHERE e.organization_id = org AND e.enabled
                  AND (pg_catalog.cardinality(e.events) = 0 OR kind = ANY (e.events));
        END
        $body$
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_events() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF NOT EXISTS (
                SELECT 1 FROM %1$I.partner_webhook_endpoints e
                WHERE e.enabled AND e.organization_id IN (OLD.organization_id, NEW.organization_id)
            ) THEN
                RETURN NULL;
            END IF;
            IF TG_OP = 'INSERT' THEN
                PERFORM %1$I.partner_api_raise_order_event(
                    NEW.organization_id, 'order.created', NEW.id::text, pg_catalog.to_jsonb(NEW));
            ELSIF TG_OP = 'DELETE' THEN
                PERFORM %1$I.partner_api_raise_order_event(
                    OLD.organization_id, 'order.deleted', OLD.id::text, NULL);
            ELSIF NEW.organization_id IS DISTINCT FROM OLD.organization_id
                  OR NEW.id IS DISTINCT FROM OLD.id THEN
                -- Moved: gone from where it was, new where it is.
                PERFORM %1$I.partner_api_raise_order_event(
                    OLD.organization_id, 'order.deleted', OLD.id::text, NULL);
                PERFORM %1$I.partner_api_raise_order_event(
                    NEW.organization_id, 'order.created', NEW.id::text, pg_catalog.to_jsonb(NEW));
            -- Rows compared as jsonb with pg_catalog's operator: a row type's `=` could be
            -- anyone's.
            ELSIF NOT (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.=) pg_catalog.to_jsonb(OLD)) THEN
                PERFORM %1$I.partner_api_raise_order_event(
                    NEW.organization_id, 'order.updated', NEW.id::text, pg_catalog.to_jsonb(NEW));
            END IF;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    -- Called by our triggers only (the SECURITY DEFINER one as the owner), or by the owner.
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_raise_order_events() FROM PUBLIC',
                   schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_raise_order_event(text, text, text, jsonb) FROM PUBLIC',
                   schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_serve_orders_table(regclass, boolean) FROM PUBLIC',
                   schema_name);

    -- What the owner must know, as warnings (the migrations hide notices): tables of other
    -- roles that carry our triggers, now refused; and a schema every role may create in,
    -- where a function of anyone's could stand in for a built-in one elsewhere.
    FOR unregistered IN
        SELECT DISTINCT t.tgrelid::regclass AS relid
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
        WHERE NOT t.tgisinternal AND c.relpersistence <> 't'
          AND t.tgrelid <> 'partner_orders'::regclass::oid
          AND NOT pg_has_role(current_user, c.relowner, 'MEMBER')
          AND t.tgfoid IN ('partner_api_log_order_change()'::regprocedure::oid,
                           'partner_api_raise_order_events()'::regprocedure::oid,
                           'partner_api_notify_orders()'::regprocedure::oid,
                           'partner_api_notify_all_orders()'::regprocedure::oid)
    LOOP
        RAISE WARNING 'partner_api: % carries the crate''s order triggers but is not the owner''s: '
            'they now refuse to run there; register it with partner_api_serve_orders_table if it is '
            'a table of orders', unregistered.relid;
    END LOOP;
    IF has_schema_privilege('public', schema_name, 'CREATE') THEN
        RAISE WARNING 'partner_api: every role may create objects in the schema %; '
            'REVOKE CREATE ON SCHEMA % FROM PUBLIC', schema_name, schema_name;
    END IF;
END
$migration$;
