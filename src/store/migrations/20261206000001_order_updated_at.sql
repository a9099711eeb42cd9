-- When an order last changed (#57, API version 2026-11-28): `updatedAt` and the filters
-- `updated_since` and `updated_before` of GET /orders.
--
-- `updated_at` is NULL for an order never changed since its creation (served as its
-- `created_at`), so adding it rewrites no row, and an insert pays nothing for it. An update
-- that changes a field of the order and does not set `updated_at` itself gets the time of
-- the change from the trigger below; an update that changes nothing keeps it, as it raises
-- no event.
ALTER TABLE partner_orders ADD COLUMN updated_at TIMESTAMPTZ(3);

ALTER TABLE partner_orders ADD CONSTRAINT partner_orders_updated_at_in_range
    CHECK ((updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'));

-- The filters: a range of the last change, read through this index (then sorted newest first
-- by creation, as every page). Built inside the migration's transaction, it holds order writes
-- while it builds: on a large table, create it beforehand with CREATE INDEX CONCURRENTLY (same
-- name and definition), and the migration finds it.
CREATE INDEX IF NOT EXISTS partner_orders_updated
    ON partner_orders (organization_id, (COALESCE(updated_at, created_at)));

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- Runs as the writer, with its rights (it changes nothing but the row being written), on a
    -- pinned search path (pg_catalog, searched first, gives the row comparison's operators).
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_stamp_order_change() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at
               AND (NEW.organization_id, NEW.id, NEW.providers, NEW.advertiser_name,
                    NEW.campaign_name, NEW.budget_dkk, NEW.start_date, NEW.end_date,
                    NEW.status, NEW.external_reference, NEW.created_at)
                   IS DISTINCT FROM
                   (OLD.organization_id, OLD.id, OLD.providers, OLD.advertiser_name,
                    OLD.campaign_name, OLD.budget_dkk, OLD.start_date, OLD.end_date,
                    OLD.status, OLD.external_reference, OLD.created_at) THEN
                NEW.updated_at := pg_catalog.clock_timestamp();
            END IF;
            RETURN NEW;
        END
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE ALL ON FUNCTION %1$I.partner_api_stamp_order_change() FROM PUBLIC',
                   schema_name);
    EXECUTE format('CREATE TRIGGER partner_orders_updated_at BEFORE UPDATE ON %1$I.partner_orders '
                   'FOR EACH ROW EXECUTE FUNCTION %1$I.partner_api_stamp_order_change()',
                   schema_name);
END
$migration$;
