-- An order's last change where the host's mapped table has no column for it (#57): the time
-- of its last change that the crate recorded, its newest `order.updated` event.
--
-- Nothing is written on the order's write path beyond its one event. Two things keep the
-- time readable:
-- * `partner_api_recorded_last_change` reads the order's newest kept event other than its
--   creation (through the index `partner_api_order_events_changes`, which the map's
--   `schema_indexes` lists for the host to build): an update gives its time; a deletion says
--   the order was made again since (it exists), so it has not changed since that creation.
-- * retention deletes events; what it deletes of an order's changes is carried, off the write
--   path, into `partner_api_order_last_changes` by a statement trigger on the deletion: for
--   each order, its last deleted event decides (an update: its time; a deletion: nothing
--   left to carry). Events of one order are deleted in their order (retention deletes a
--   prefix of each feed), so the last deleted is the newest of them.
-- Only a registration whose map leaves `updated_at` out turns the carrying on
-- (`keeps_last_changes`); the crate's own table and maps with the column never fill the table.

CREATE TABLE partner_api_order_last_changes (
    organization_id TEXT NOT NULL,
    order_id        TEXT COLLATE "C" NOT NULL,
    changed_at      TIMESTAMPTZ(3) NOT NULL,
    PRIMARY KEY (organization_id, order_id)
);

ALTER TABLE partner_api_event_retention
    ADD COLUMN keeps_last_changes BOOLEAN NOT NULL DEFAULT false;

DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee_name name;
BEGIN
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_recorded_last_change(org text, order_key text)
        RETURNS timestamptz
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
            SELECT x.changed_at FROM (
                (SELECT e.id,
                        CASE WHEN e.change OPERATOR(pg_catalog.=) 'order.updated'
                             THEN e.created_at END AS changed_at
                 FROM %1$I.partner_api_order_events e
                 WHERE e.organization_id OPERATOR(pg_catalog.=) org
                   AND e.order_id OPERATOR(pg_catalog.=) (order_key COLLATE "C")
                   AND e.change OPERATOR(pg_catalog.<>) 'order.created'
                 ORDER BY e.id DESC LIMIT 1)
                UNION ALL
                SELECT 0, c.changed_at FROM %1$I.partner_api_order_last_changes c
                WHERE c.organization_id OPERATOR(pg_catalog.=) org
                  AND c.order_id OPERATOR(pg_catalog.=) (order_key COLLATE "C")
            ) x
            ORDER BY x.id DESC LIMIT 1
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_recorded_last_change(text, text) FROM PUBLIC',
                   schema_name);
    -- The roles that read orders (the serving and key-admin roles of the documented ones).
    FOR grantee_name IN
        SELECT DISTINCT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_table_privilege(r.oid, format('%1$I.partner_orders', schema_name), 'SELECT')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.partner_api_recorded_last_change(text, text) TO %2$I',
                       schema_name, grantee_name);
    END LOOP;

    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_carry_last_changes() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF NOT (SELECT r.keeps_last_changes FROM %1$I.partner_api_event_retention r) THEN
                RETURN NULL;
            END IF;
            WITH last_gone AS (
                SELECT DISTINCT ON (g.organization_id, g.order_id)
                       g.organization_id, g.order_id, g.change, g.created_at
                FROM gone g
                WHERE g.change OPERATOR(pg_catalog.<>) 'order.created'
                ORDER BY g.organization_id, g.order_id, g.id DESC),
            carried AS (
                INSERT INTO %1$I.partner_api_order_last_changes AS c
                    (organization_id, order_id, changed_at)
                SELECT l.organization_id, l.order_id, l.created_at FROM last_gone l
                WHERE l.change OPERATOR(pg_catalog.=) 'order.updated'
                ON CONFLICT (organization_id, order_id)
                DO UPDATE SET changed_at = EXCLUDED.changed_at)
            DELETE FROM %1$I.partner_api_order_last_changes c USING last_gone l
            WHERE c.organization_id OPERATOR(pg_catalog.=) l.organization_id
              AND c.order_id OPERATOR(pg_catalog.=) l.order_id
              AND l.change OPERATOR(pg_catalog.=) 'order.deleted';
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_carry_last_changes() FROM PUBLIC',
                   schema_name);
    EXECUTE format('CREATE TRIGGER partner_api_carry_last_changes '
                   'AFTER DELETE ON %1$I.partner_api_order_events '
                   'REFERENCING OLD TABLE AS gone FOR EACH STATEMENT '
                   'EXECUTE FUNCTION %1$I.partner_api_carry_last_changes()', schema_name);
END
$migration$;
