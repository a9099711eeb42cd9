-- The order writes' cost (#56): the order's snapshot in its event built as a row of a type of
-- the crate's, `partner_api_order_snapshot`, turned to JSON whole, instead of
-- `jsonb_build_object` over twenty arguments. The JSON is the same value (the fields' names
-- are the contract's keys, jsonb orders keys itself, and each field has the type its argument
-- had); what changes is the work: `jsonb_build_object` looks up the type of each of its
-- arguments, each key included, in the catalog caches on every call, where a row's fields are
-- looked up once each, keys being its field names. About 15,000 instructions of the
-- trigger's 257,000 per order insert (`benches/write_instructions.sh`, 2026-11-29). The
-- snapshot of a mapped table, in its trigger and in the capture reader, is built the same way
-- (their SQL is the crate's code, not a migration's).
CREATE TYPE partner_api_order_snapshot AS (
    id                 TEXT,
    providers          TEXT[],
    advertiser_name    TEXT,
    campaign_name      TEXT,
    budget_dkk         BIGINT,
    start_date         TEXT,
    end_date           TEXT,
    status             TEXT,
    external_reference TEXT,
    created_at         TEXT
);

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- As in 20261210000001, with the snapshot built as a row of partner_api_order_snapshot.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_events() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            shown jsonb;
            before jsonb;
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF TG_OP = 'UPDATE'
               AND NEW.organization_id IS NOT DISTINCT FROM OLD.organization_id
               AND NEW.id IS NOT DISTINCT FROM OLD.id
               -- Rows compared as jsonb with pg_catalog's operator: a row type's `=` could be
               -- anyone's.
               AND pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.=) pg_catalog.to_jsonb(OLD) THEN
                RETURN NULL;
            END IF;
            IF TG_OP <> 'INSERT' THEN
                -- The providers the feed showed before: the order's, when it was shown.
                BEGIN
                    before := CASE WHEN
                            OLD.id IS NOT NULL
                        AND OLD.providers IS NOT NULL
                        AND pg_catalog.array_position(OLD.providers::text[], NULL) IS NULL
                        AND OLD.advertiser_name IS NOT NULL AND OLD.campaign_name IS NOT NULL
                        AND OLD.status IS NOT NULL AND OLD.external_reference IS NOT NULL
                        AND OLD.budget_dkk::numeric >= 0::numeric
                        AND OLD.budget_dkk::numeric <= 9007199254740991::numeric
                        AND OLD.budget_dkk::numeric = pg_catalog.trunc(OLD.budget_dkk::numeric)
                        AND OLD.start_date::date >= '0001-01-01'::date
                        AND OLD.start_date::date < '10000-01-01'::date
                        AND OLD.end_date::date >= '0001-01-01'::date
                        AND OLD.end_date::date < '10000-01-01'::date
                        AND OLD.created_at::timestamptz >= '0001-01-01 00:00:00+00'::timestamptz
                        AND OLD.created_at::timestamptz < '10000-01-01 00:00:00+00'::timestamptz
                    THEN pg_catalog.to_jsonb(OLD.providers::text[]) ELSE '[]'::jsonb END;
                EXCEPTION WHEN OTHERS THEN
                    before := '[]'::jsonb;
                END;
            END IF;
            IF TG_OP = 'DELETE' THEN
                INSERT INTO %1$I.partner_api_order_events
                        (organization_id, change, order_id, order_row, previous_providers)
                    VALUES (OLD.organization_id, 'order.deleted', OLD.id::text, NULL, before);
                RETURN NULL;
            END IF;
            IF TG_OP = 'UPDATE' AND (NEW.organization_id IS DISTINCT FROM OLD.organization_id
                                     OR NEW.id IS DISTINCT FROM OLD.id) THEN
                -- Moved: gone from where it was, new where it is (with nothing before).
                INSERT INTO %1$I.partner_api_order_events
                        (organization_id, change, order_id, order_row, previous_providers)
                    VALUES (OLD.organization_id, 'order.deleted', OLD.id::text, NULL, before);
                before := NULL;
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
                THEN pg_catalog.to_jsonb(ROW(
                    NEW.id::text,
                    NEW.providers::text[],
                    NEW.advertiser_name::text,
                    NEW.campaign_name::text,
                    NEW.budget_dkk::numeric::bigint,
                    pg_catalog.to_char(NEW.start_date::date, 'YYYY-MM-DD'),
                    pg_catalog.to_char(NEW.end_date::date, 'YYYY-MM-DD'),
                    NEW.status::text,
                    NEW.external_reference::text,
                    pg_catalog.to_char(
                        NEW.created_at::timestamptz AT TIME ZONE 'UTC',
                        'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::%1$I.partner_api_order_snapshot)
                END;
            EXCEPTION WHEN OTHERS THEN
                shown := NULL;
            END;
            INSERT INTO %1$I.partner_api_order_events
                    (organization_id, change, order_id, order_row, previous_providers)
                VALUES (NEW.organization_id,
                        CASE WHEN before IS NULL THEN 'order.created' ELSE 'order.updated' END,
                        NEW.id::text, shown, before);
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
