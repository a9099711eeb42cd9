-- One record per order change (#56): the event the orders' trigger writes in the feed is also
-- what the caches' listeners read, so the `UNLOGGED` change log, its trigger and its trimming
-- go. A listener reads the events by id (the table's identity) through
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
END
$migration$;
