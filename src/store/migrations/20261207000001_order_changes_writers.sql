-- The caches' read of the orders' changes waits for the writers of the events table only
-- (see src/cache/postgres.rs, `OrderLog`). Before, a read moved its cursor once a later
-- snapshot's `xmin` passed a transaction id the read took for itself: any transaction of the
-- PostgreSQL instance holds `xmin` back, in any database (a host's hour-long batch job, another
-- service's open transaction), and a listener starting beside one gave its caches no
-- evidence until it ended. Now each read returns its snapshot and the transactions that hold a
-- write lock on the events table of this database after that snapshot was taken: only those
-- can have taken an id the read cannot see. The read no longer takes a transaction id (10 a
-- second per replica before).

DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee_name name;
    readers name[];
BEGIN
    -- Same grants as before.
    SELECT pg_catalog.array_agg(r.rolname) INTO readers FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid,
                format('%1$I.partner_api_order_changes_after(bigint)', schema_name), 'EXECUTE');
    EXECUTE format('DROP FUNCTION %1$I.partner_api_order_changes_after(bigint)', schema_name);
    -- `writers`: the top-level transaction ids (the smallest id of each virtual transaction;
    -- a subtransaction's id is taken after its parent's) of the transactions holding
    -- `RowExclusiveLock` on the events table, as 64-bit ids. pg_locks gives 32-bit ids: each is
    -- placed in the epoch of the snapshot's `xmax`, or the one before when that puts it at or
    -- past `xmax`. A writer under way at the snapshot has an id below `xmax`, so it is placed
    -- right; one that took its id later (which the read need not wait for) may be placed an
    -- epoch early, and then reads as ended.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_order_changes_after(after_event bigint)
        RETURNS TABLE (snapshot text, writers text[], newest bigint, changes text[],
                       pruned text[], wal_lsn text, materialized_lsn text)
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
            SELECT s::text,
                   ARRAY(SELECT (CASE WHEN w.base + w.xid >= w.next
                                      THEN w.base + w.xid - 4294967296
                                      ELSE w.base + w.xid END)::text
                         FROM (SELECT pg_catalog.min(t.transactionid::text::bigint) AS xid,
                                      (pg_catalog.pg_snapshot_xmax(s)::text::bigint >> 32) << 32
                                          AS base,
                                      pg_catalog.pg_snapshot_xmax(s)::text::bigint AS next
                               FROM pg_catalog.pg_locks r
                               JOIN pg_catalog.pg_locks t
                                 ON t.virtualtransaction = r.virtualtransaction
                                AND t.locktype = 'transactionid'
                               WHERE r.locktype = 'relation'
                                 AND r.relation = '%1$I.partner_api_order_events'::regclass
                                 AND r.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname = pg_catalog.current_database())
                                 AND r.mode = 'RowExclusiveLock'
                                 AND r.granted
                               GROUP BY r.virtualtransaction) w),
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
