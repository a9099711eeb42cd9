-- One record per order change (#56): the event the orders' trigger writes in the feed is also
-- what the caches' listeners read, so the `UNLOGGED` change log, its trigger and its trimming
-- go; and the webhooks' outbox is written from the events off the write path, when they get
-- their positions in the feed (below), so a write with endpoints costs what one without does. A listener reads the events by id (the table's identity) through
-- partner_api_order_changes_after, and the argument that it misses none is on
-- src/cache/postgres.rs (OrderLog). The organizations whose events retention deleted are in
-- its tombstones, which a listener reads too: an event pruned before a listener read it
-- still reaches the caches.
CREATE INDEX partner_api_pruned_events_max_id ON partner_api_pruned_events (max_id);

DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee_name name;
    served regclass;
BEGIN
    -- The order writes wait for this migration: a write under way has committed, with the
    -- triggers of before, when the lock is held; one after it runs the triggers below.
    EXECUTE format('LOCK TABLE %1$I.partner_orders IN SHARE ROW EXCLUSIVE MODE', schema_name);
    FOR served IN SELECT t.relid FROM partner_api_order_tables t LOOP
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', served);
    END LOOP;
    -- The change log's triggers go; a table registered for the change log alone
    -- (partner_api_serve_orders_table(t, false)) gets the events' trigger, which the caches
    -- now read. A mapped table's own trigger is made again by its next registration.
    EXECUTE format('DROP TRIGGER IF EXISTS partner_orders_log ON %1$I.partner_orders', schema_name);
    FOR served IN SELECT t.relid FROM partner_api_order_tables t LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS partner_orders_log ON %s', served);
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g
                       WHERE g.tgrelid OPERATOR(pg_catalog.=) served::oid
                         AND g.tgname IN ('partner_orders_webhooks', 'partner_api_orders')) THEN
            EXECUTE format('CREATE TRIGGER partner_orders_webhooks '
                           'AFTER INSERT OR UPDATE OR DELETE ON %2$s FOR EACH ROW '
                           'EXECUTE FUNCTION %1$I.partner_api_raise_order_events()',
                           schema_name, served);
        END IF;
    END LOOP;
    EXECUTE format('DROP FUNCTION %1$I.partner_api_log_order_change()', schema_name);
    EXECUTE format('DROP TABLE %1$I.partner_api_order_changes', schema_name);

    -- The caches' read: in one snapshot, its xmin, a transaction id taken after it (the
    -- read's own: larger than every id a transaction under way at the snapshot has; the
    -- snapshot's xmax is not, it only follows the ended ones), the largest event id it sees,
    -- each event after `after_event` (its id and organization, in id order), and the
    -- organizations of the events retention deleted after it (NULL: no events, a listener's
    -- start). Reads only, as the owner: the serving role reads no snapshot of an order
    -- through it.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_order_changes_after(after_event bigint)
        RETURNS TABLE (snapshot_xmin text, read_xid text, newest bigint, changes text[],
                       pruned text[])
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
            SELECT pg_catalog.pg_snapshot_xmin(s)::text, pg_catalog.pg_current_xact_id()::text,
                   (SELECT pg_catalog.max(e.id) FROM %1$I.partner_api_order_events e),
                   ARRAY(SELECT e.id::text || ' ' || e.organization_id
                         FROM %1$I.partner_api_order_events e
                         WHERE after_event IS NOT NULL AND e.id > after_event ORDER BY e.id),
                   ARRAY(SELECT DISTINCT p.organization_id FROM %1$I.partner_api_pruned_events p
                         WHERE after_event IS NOT NULL AND p.max_id > after_event)
            FROM pg_catalog.pg_current_snapshot() AS s
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_order_changes_after(bigint) FROM PUBLIC',
                   schema_name);
    -- The roles that read the feed (the serving role of the documented ones) read this.
    FOR grantee_name IN
        SELECT DISTINCT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user
          AND pg_catalog.has_function_privilege(r.oid,
                format('%1$I.partner_api_read_order_events(text, bigint, integer, text[], boolean)', schema_name),
                'EXECUTE')
          AND NOT r.rolsuper AND r.rolname !~ '^pg_'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.partner_api_order_changes_after(bigint) TO %2$I',
                       schema_name, grantee_name);
    END LOOP;

    -- Registering a table gives it the events' trigger, which the caches read; `webhooks`
    -- is kept for the calls of earlier versions and changes nothing (a table without events
    -- would reach no cache).
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_serve_orders_table(orders regclass, webhooks boolean DEFAULT true)
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
                      '%1$I.partner_api_raise_order_events()'::regprocedure::oid,
                      '%1$I.partner_api_notify_orders()'::regprocedure::oid,
                      '%1$I.partner_api_refuse_truncate()'::regprocedure::oid])
            LOOP
                EXECUTE pg_catalog.format('DROP TRIGGER %%I ON %%s', old_trigger, orders);
            END LOOP;
            EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_webhooks '
                           'AFTER INSERT OR UPDATE OR DELETE ON %%s FOR EACH ROW '
                           'EXECUTE FUNCTION %1$I.partner_api_raise_order_events()', orders);
            EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_refuse_truncate '
                           'BEFORE TRUNCATE ON %%s FOR EACH STATEMENT '
                           'EXECUTE FUNCTION %1$I.partner_api_refuse_truncate()', orders);
        END
        $body$
    $sql$, schema_name);

    -- The orders' trigger writes the change's event and nothing else: the webhooks come from
    -- the event when it is stamped. (Its rendering and checks are those of 20261203000001.)
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_events() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            shown jsonb;
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF TG_OP = 'DELETE' THEN
                INSERT INTO %1$I.partner_api_order_events (organization_id, change, order_id, order_row)
                    VALUES (OLD.organization_id, 'order.deleted', OLD.id::text, NULL);
                RETURN NULL;
            END IF;
            IF TG_OP = 'UPDATE' THEN
                IF NEW.organization_id IS DISTINCT FROM OLD.organization_id
                   OR NEW.id IS DISTINCT FROM OLD.id THEN
                    -- Moved: gone from where it was, new where it is.
                    INSERT INTO %1$I.partner_api_order_events (organization_id, change, order_id, order_row)
                        VALUES (OLD.organization_id, 'order.deleted', OLD.id::text, NULL);
                -- Rows compared as jsonb with pg_catalog's operator: a row type's `=` could be
                -- anyone's.
                ELSIF pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.=) pg_catalog.to_jsonb(OLD) THEN
                    RETURN NULL;
                END IF;
            END IF;
            BEGIN
                shown := CASE WHEN
                        NEW.id IS NOT NULL
                    AND NEW.providers IS NOT NULL
                    AND pg_catalog.array_position(NEW.providers::text[], NULL) IS NULL
                    AND NEW.advertiser_name IS NOT NULL AND NEW.campaign_name IS NOT NULL
                    AND NEW.status IS NOT NULL AND NEW.external_reference IS NOT NULL
                    AND NEW.budget_dkk::numeric >= 0::numeric
                    AND NEW.budget_dkk::numeric <= 9007199254740991::numeric
                    AND NEW.budget_dkk::numeric = pg_catalog.trunc(NEW.budget_dkk::numeric)
                    AND NEW.start_date::date >= '0001-01-01'::date
                    AND NEW.start_date::date < '10000-01-01'::date
                    AND NEW.end_date::date >= '0001-01-01'::date
                    AND NEW.end_date::date < '10000-01-01'::date
                    AND NEW.created_at::timestamptz >= '0001-01-01 00:00:00+00'::timestamptz
                    AND NEW.created_at::timestamptz < '10000-01-01 00:00:00+00'::timestamptz
                THEN pg_catalog.jsonb_build_object(
                    'id', NEW.id::text,
                    'providers', pg_catalog.to_jsonb(NEW.providers::text[]),
                    'advertiser_name', NEW.advertiser_name::text,
                    'campaign_name', NEW.campaign_name::text,
                    'budget_dkk', NEW.budget_dkk::numeric::bigint,
                    'start_date', pg_catalog.to_char(NEW.start_date::date, 'YYYY-MM-DD'),
                    'end_date', pg_catalog.to_char(NEW.end_date::date, 'YYYY-MM-DD'),
                    'status', NEW.status::text,
                    'external_reference', NEW.external_reference::text,
                    'created_at', pg_catalog.to_char(
                        NEW.created_at::timestamptz AT TIME ZONE 'UTC',
                        'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                END;
            EXCEPTION WHEN OTHERS THEN
                shown := NULL;
            END;
            INSERT INTO %1$I.partner_api_order_events (organization_id, change, order_id, order_row)
                VALUES (NEW.organization_id,
                        CASE WHEN TG_OP = 'INSERT' OR NEW.organization_id IS DISTINCT FROM OLD.organization_id
                                  OR NEW.id IS DISTINCT FROM OLD.id
                             THEN 'order.created' ELSE 'order.updated' END,
                        NEW.id::text, shown);
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format('DROP FUNCTION %1$I.partner_api_raise_webhook(text, text, text, jsonb, bigint, timestamptz)',
                   schema_name);

    -- A stamping round also writes the webhooks of the events it stamps, in feed order: a
    -- message per event to which an enabled endpoint of the organization subscribes, and a
    -- delivery per such endpoint, for events written since the endpoint was (last) enabled.
    -- Each event is stamped once, so its webhooks are written once, in the round's
    -- transaction (a round that fails writes neither). Otherwise as in 20261201000001.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_stamp_order_events(org text, max_events integer) RETURNS bigint
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            last_stamped bigint;
            stamped_now bigint;
        BEGIN
            INSERT INTO %1$I.partner_api_event_feeds (organization_id) VALUES (org)
                ON CONFLICT (organization_id) DO NOTHING;
            SELECT f.last_position INTO last_stamped FROM %1$I.partner_api_event_feeds f
                WHERE f.organization_id = org FOR UPDATE;
            WITH fresh AS (
                SELECT e.id, last_stamped + pg_catalog.row_number() OVER (ORDER BY e.id) AS stamp
                FROM %1$I.partner_api_order_events e
                WHERE e.organization_id = org AND e.position IS NULL
                ORDER BY e.id
                LIMIT GREATEST(max_events, 1)),
            stamped AS (
                UPDATE %1$I.partner_api_order_events e SET position = fresh.stamp
                FROM fresh WHERE e.id = fresh.id
                RETURNING e.id, e.position, e.change, e.order_id, e.order_row, e.created_at),
            messages AS (
                INSERT INTO %1$I.partner_webhook_messages
                    (organization_id, event_type, order_id, order_row, event_id, raised_at)
                SELECT org, s.change, s.order_id, s.order_row, s.id, s.created_at
                FROM stamped s
                WHERE EXISTS (
                    SELECT 1 FROM %1$I.partner_webhook_endpoints w
                    WHERE w.organization_id = org AND w.enabled AND s.created_at >= w.enabled_at
                      AND s.id > (SELECT b.after_event FROM %1$I.partner_api_webhooks_from b)
                      AND (pg_catalog.cardinality(w.events) = 0 OR s.change = ANY (w.events)))
                ORDER BY s.position
                RETURNING id, event_type, order_id, raised_at),
            deliveries AS (
                INSERT INTO %1$I.partner_webhook_deliveries (message_id, endpoint_id, order_id)
                SELECT m.id, w.id, m.order_id
                FROM messages m
                JOIN %1$I.partner_webhook_endpoints w
                  ON w.organization_id = org AND w.enabled AND m.raised_at >= w.enabled_at
                 AND (pg_catalog.cardinality(w.events) = 0 OR m.event_type = ANY (w.events))
                ORDER BY m.id, w.id)
            SELECT pg_catalog.count(*), COALESCE(pg_catalog.max(s.position), last_stamped)
                INTO stamped_now, last_stamped
                FROM stamped s;
            UPDATE %1$I.partner_api_event_feeds SET last_position = last_stamped
                WHERE organization_id = org;
            RETURN stamped_now;
        END
        $body$
    $sql$, schema_name);

    -- When an endpoint was (last) enabled: it hears the events written from then on.
    EXECUTE format('ALTER TABLE %1$I.partner_webhook_endpoints '
                   'ADD COLUMN enabled_at TIMESTAMPTZ(3) NOT NULL DEFAULT pg_catalog.clock_timestamp()',
                   schema_name);
    EXECUTE format('UPDATE %1$I.partner_webhook_endpoints SET enabled_at = created_at', schema_name);
    -- Events written before this migration raised their webhooks when written: none is raised
    -- again. The order writes were held from the migration's start (above), so every event
    -- the trigger of before wrote has committed, with an id at or below the largest now (ids
    -- are taken in order): the stamping writes webhooks for ids above it only.
    EXECUTE format('CREATE TABLE %1$I.partner_api_webhooks_from ('
                   'only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row), '
                   'after_event BIGINT NOT NULL)', schema_name);
    EXECUTE format('INSERT INTO %1$I.partner_api_webhooks_from (after_event) '
                   'SELECT COALESCE(pg_catalog.max(e.id), 0) FROM %1$I.partner_api_order_events e',
                   schema_name);
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_enabled_by_admins() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID OPERATOR(pg_catalog.<>) '%1$I.partner_webhook_endpoints'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF NOT pg_catalog.has_table_privilege(CURRENT_USER, TG_RELID, 'INSERT') THEN
                RAISE EXCEPTION 'partner_api: only a role that may add webhook endpoints enables one'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            NEW.enabled_at := pg_catalog.clock_timestamp();
            RETURN NEW;
        END
        $body$
    $sql$, schema_name);

    -- The feeds the stamping for webhooks needs, made in a statement of their own (committed
    -- before the stamping, whose lock of a feed's row it then takes without waiting): for
    -- the organizations with an enabled endpoint and events not stamped yet, at most
    -- `max_organizations`, in id order (two replicas' calls take the same keys in the same
    -- order). Returns how many it made.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_open_feeds_for_webhooks(max_organizations integer)
        RETURNS bigint
        LANGUAGE sql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
            WITH opened AS (
                INSERT INTO %1$I.partner_api_event_feeds (organization_id)
                SELECT w.organization_id FROM (
                    SELECT DISTINCT e.organization_id FROM %1$I.partner_webhook_endpoints e
                    WHERE e.enabled) w
                WHERE NOT EXISTS (SELECT 1 FROM %1$I.partner_api_event_feeds f
                                  WHERE f.organization_id = w.organization_id)
                  AND EXISTS (SELECT 1 FROM %1$I.partner_api_order_events u
                              WHERE u.organization_id = w.organization_id AND u.position IS NULL)
                ORDER BY w.organization_id
                LIMIT GREATEST(max_organizations, 1)
                ON CONFLICT (organization_id) DO NOTHING
                RETURNING 1)
            SELECT pg_catalog.count(*) FROM opened
        $body$
    $sql$, schema_name);

    -- The webhooks of the organizations with an enabled endpoint and events not stamped yet:
    -- a stamping round each (at most `max_events` events), at most `max_organizations`
    -- organizations a call, the oldest waiting first. Run by the webhooks' dispatcher before
    -- each claim, on every replica, after partner_api_open_feeds_for_webhooks: an
    -- organization whose feed another call (or a reader of the feed, or retention) is
    -- stamping, or that has no feed yet, is skipped, not waited for, so two replicas' calls
    -- neither queue nor deadlock (their orders of organizations may differ). Returns how many
    -- events it stamped.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_stamp_for_webhooks(max_organizations integer, max_events integer)
        RETURNS bigint
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            org text;
            stamped bigint := 0;
        BEGIN
            FOR org IN
                SELECT w.organization_id FROM (
                    SELECT DISTINCT e.organization_id FROM %1$I.partner_webhook_endpoints e
                    WHERE e.enabled) w
                CROSS JOIN LATERAL (
                    SELECT u.id FROM %1$I.partner_api_order_events u
                    WHERE u.organization_id = w.organization_id AND u.position IS NULL
                    ORDER BY u.id LIMIT 1) oldest
                ORDER BY oldest.id
                LIMIT GREATEST(max_organizations, 1)
            LOOP
                PERFORM 1 FROM %1$I.partner_api_event_feeds f
                    WHERE f.organization_id = org FOR UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND;
                stamped := stamped + %1$I.partner_api_stamp_order_events(org, max_events);
            END LOOP;
            RETURN stamped;
        END
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_stamp_for_webhooks(integer, integer) FROM PUBLIC',
                   schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_open_feeds_for_webhooks(integer) FROM PUBLIC',
                   schema_name);
    -- The roles that claim deliveries (the delivering role of the documented ones) run it.
    FOR grantee_name IN
        SELECT DISTINCT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_column_privilege(r.oid,
                format('%1$I.partner_webhook_deliveries', schema_name), 'attempts', 'UPDATE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.partner_api_stamp_for_webhooks(integer, integer), '
                       '%1$I.partner_api_open_feeds_for_webhooks(integer) TO %2$I',
                       schema_name, grantee_name);
    END LOOP;
END
$migration$;
