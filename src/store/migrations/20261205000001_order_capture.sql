-- The capture mode (#56), opt-in: the order writes run no trigger of ours; the events are
-- built from the write-ahead log by logical decoding (`test_decoding`, read through the SQL
-- slot functions by the one replica holding the capture's lease, see
-- src/store/postgres/capture). Nothing here changes the default mode's writes.

-- Where a captured event came from: its transaction's commit position and its place among the
-- events of that transaction. A batch materialized twice (a reader killed between its commit
-- and the slot's advance) writes each event once.
ALTER TABLE partner_api_order_events
    ADD COLUMN captured_lsn pg_lsn,
    ADD COLUMN captured_index integer;
CREATE UNIQUE INDEX partner_api_order_events_captured
    ON partner_api_order_events (captured_lsn, captured_index) WHERE captured_lsn IS NOT NULL;

-- One row: the capture's state. `slot_name` NULL: the triggers write the events (the default
-- mode). Otherwise every order change committed at or before `materialized_lsn` has its
-- events. `retired_slot`: a slot the stop left to drop (it is dropped after the stop's
-- commit, by the stop or the next reader). The lease: the one replica reading the slot.
CREATE TABLE partner_api_order_capture (
    only_row          BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    slot_name         TEXT,
    materialized_lsn  pg_lsn,
    retired_slot      TEXT,
    caught_up_at      TIMESTAMPTZ,
    lease_holder      TEXT,
    lease_until       TIMESTAMPTZ
);
INSERT INTO partner_api_order_capture DEFAULT VALUES;

DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee_name name;
    readers name[];
BEGIN
    -- The caches' read grows the write-ahead log's insert position and, in the capture mode,
    -- the position through which the order changes are materialized (NULL in the default
    -- mode): a listener's evidence waits until the second passes the first (see
    -- src/cache/postgres.rs). Same grants as before.
    SELECT pg_catalog.array_agg(r.rolname) INTO readers FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid,
                format('%1$I.partner_api_order_changes_after(bigint)', schema_name), 'EXECUTE');
    EXECUTE format('DROP FUNCTION %1$I.partner_api_order_changes_after(bigint)', schema_name);
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_order_changes_after(after_event bigint)
        RETURNS TABLE (snapshot_xmin text, read_xid text, newest bigint, changes text[],
                       pruned text[], wal_lsn text, materialized_lsn text)
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
            SELECT pg_catalog.pg_snapshot_xmin(s)::text, pg_catalog.pg_current_xact_id()::text,
                   (SELECT pg_catalog.max(e.id) FROM %1$I.partner_api_order_events e),
                   ARRAY(SELECT e.id::text || ' ' || e.organization_id
                         FROM %1$I.partner_api_order_events e
                         WHERE after_event IS NOT NULL AND e.id > after_event ORDER BY e.id),
                   ARRAY(SELECT DISTINCT p.organization_id FROM %1$I.partner_api_pruned_events p
                         WHERE after_event IS NOT NULL AND p.max_id > after_event),
                   pg_catalog.pg_current_wal_insert_lsn()::text,
                   (SELECT CASE WHEN c.slot_name IS NULL THEN NULL
                                ELSE COALESCE(c.materialized_lsn, '0/0'::pg_lsn)::text END
                    FROM %1$I.partner_api_order_capture c)
            FROM pg_catalog.pg_current_snapshot() AS s
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_order_changes_after(bigint) FROM PUBLIC',
                   schema_name);
    FOREACH grantee_name IN ARRAY COALESCE(readers, ARRAY[]::name[]) LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.partner_api_order_changes_after(bigint) TO %2$I',
                       schema_name, grantee_name);
    END LOOP;
END
$migration$;
