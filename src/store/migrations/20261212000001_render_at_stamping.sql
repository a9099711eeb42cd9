-- The order writes' cost (#56): a change of `partner_orders` no longer renders its order's
-- snapshot in the writer's transaction. Its trigger writes the order's fields as they are,
-- typed, into the event (the `new_*` columns), and the stamping, which rewrites every event
-- once already when it hands out its position, renders them into `order_row` and clears them.
-- Nobody reads an event before it is stamped but the caches' reader (its id and organization)
-- and retention (which stamps first); the feed, the webhooks and the capture's readers see
-- `order_row` as before, to the byte. The writer is spared the checks, the `to_char`s, the
-- JSON and the exception block around them: per single-row insert, the trigger's cost falls
-- from about 242,000 instructions to about 134,000 (`benches/write_instructions.sh`,
-- 2026-11-29). A change's `previous_providers` (updates and deletions only) is still the
-- trigger's: it needs the row before. An update that leaves the order where it is takes a
-- way of its own too: the rows compared by their bytes (not as two `to_jsonb`s), and the
-- order before checked without an exception block (its typed columns need no casts).
--
-- A host's mapped table's trigger (made by the registration, in Rust) writes an inserted
-- order's fields into the same columns. `new_created_at` is the mark: NOT NULL for an order
-- written with its fields (every order of `partner_orders`: the column is), NULL for the
-- events written with their snapshot (a mapped table's updates and deletions, the capture,
-- the events written before this migration), which the stamping leaves as they are. An
-- order written with its fields but without a creation time (a map's NULL) is unshowable
-- either way.
--
-- The stamping's render never fails: the trigger's exception block
-- made an order whose render failed unshowable; the stamping renders a round in one
-- statement, where one failing row would stop its organization's feed, retention and the
-- webhooks' stamping, so what could fail is checked first instead.
ALTER TABLE partner_api_order_events
    ADD COLUMN new_providers          TEXT[],
    ADD COLUMN new_advertiser_name    TEXT,
    ADD COLUMN new_campaign_name      TEXT,
    ADD COLUMN new_budget_dkk         BIGINT,
    ADD COLUMN new_start_date         DATE,
    ADD COLUMN new_end_date           DATE,
    ADD COLUMN new_status             TEXT,
    ADD COLUMN new_external_reference TEXT,
    ADD COLUMN new_created_at         TIMESTAMPTZ;

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- As in 20261211000002, and a change of partner_orders written with its order's fields
    -- (the stamping renders them); another table's, with its snapshot, as before.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_events() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            shown jsonb;
            before jsonb;
        BEGIN
            -- An order inserted into partner_orders, the order writes' common case, first:
            -- every statement of PL/pgSQL before it costs the insert its evaluation.
            IF TG_RELID = '%1$I.partner_orders'::regclass::oid AND TG_OP = 'INSERT' THEN
                INSERT INTO %1$I.partner_api_order_events
                        (organization_id, change, order_id,
                         new_providers, new_advertiser_name, new_campaign_name, new_budget_dkk,
                         new_start_date, new_end_date, new_status, new_external_reference,
                         new_created_at)
                    VALUES (NEW.organization_id, 'order.created', NEW.id,
                            NEW.providers, NEW.advertiser_name, NEW.campaign_name, NEW.budget_dkk,
                            NEW.start_date, NEW.end_date, NEW.status, NEW.external_reference,
                            NEW.created_at);
                RETURN NULL;
            END IF;
            -- An update of partner_orders that leaves the order where it is, the next most
            -- common: its typed columns need no casts, so none can fail and no exception block
            -- is needed around the checks of the order before.
            IF TG_RELID = '%1$I.partner_orders'::regclass::oid AND TG_OP = 'UPDATE'
               AND NEW.organization_id OPERATOR(pg_catalog.=) OLD.organization_id
               AND NEW.id OPERATOR(pg_catalog.=) OLD.id THEN
                -- Nothing changed: the rows alike to the byte (pg_catalog's image equality,
                -- NULLs alike; a writer's own `=` is never asked).
                IF NEW OPERATOR(pg_catalog.*=) OLD THEN
                    RETURN NULL;
                END IF;
                INSERT INTO %1$I.partner_api_order_events
                        (organization_id, change, order_id, previous_providers,
                         new_providers, new_advertiser_name, new_campaign_name, new_budget_dkk,
                         new_start_date, new_end_date, new_status, new_external_reference,
                         new_created_at)
                    VALUES (NEW.organization_id, 'order.updated', NEW.id,
                            -- The providers the feed showed before: the order's, when it was
                            -- shown (the checks of the general way below, on typed columns).
                            -- First what the stamping's render takes for unshowable as it
                            -- could not render it (the stamping's checks, below).
                            CASE WHEN
                                    pg_catalog.array_ndims(OLD.providers) OPERATOR(pg_catalog.<>) 1
                                 OR pg_catalog.cardinality(OLD.providers) OPERATOR(pg_catalog.>) 10000000
                                 OR pg_catalog.octet_length(OLD.id)::pg_catalog.int8
                                    OPERATOR(pg_catalog.+) pg_catalog.octet_length(OLD.advertiser_name)::pg_catalog.int8
                                    OPERATOR(pg_catalog.+) pg_catalog.octet_length(OLD.campaign_name)::pg_catalog.int8
                                    OPERATOR(pg_catalog.+) pg_catalog.octet_length(OLD.status)::pg_catalog.int8
                                    OPERATOR(pg_catalog.+) pg_catalog.octet_length(OLD.external_reference)::pg_catalog.int8
                                    OPERATOR(pg_catalog.+) pg_catalog.octet_length(
                                        pg_catalog.array_to_string(OLD.providers, ''))::pg_catalog.int8
                                    OPERATOR(pg_catalog.>=) 250000000::pg_catalog.int8
                                THEN '[]'::jsonb
                            WHEN
                                    OLD.providers IS NOT NULL
                                AND pg_catalog.array_position(OLD.providers, NULL) IS NULL
                                AND OLD.advertiser_name IS NOT NULL
                                AND OLD.campaign_name IS NOT NULL
                                AND OLD.status IS NOT NULL AND OLD.external_reference IS NOT NULL
                                AND OLD.budget_dkk OPERATOR(pg_catalog.>=) 0::bigint
                                AND OLD.budget_dkk OPERATOR(pg_catalog.<=) 9007199254740991::bigint
                                AND OLD.start_date OPERATOR(pg_catalog.>=) '0001-01-01'::date
                                AND OLD.start_date OPERATOR(pg_catalog.<) '10000-01-01'::date
                                AND OLD.end_date OPERATOR(pg_catalog.>=) '0001-01-01'::date
                                AND OLD.end_date OPERATOR(pg_catalog.<) '10000-01-01'::date
                                AND OLD.created_at OPERATOR(pg_catalog.>=) '0001-01-01 00:00:00+00'::timestamptz
                                AND OLD.created_at OPERATOR(pg_catalog.<) '10000-01-01 00:00:00+00'::timestamptz
                            THEN pg_catalog.to_jsonb(OLD.providers) ELSE '[]'::jsonb END,
                            NEW.providers, NEW.advertiser_name, NEW.campaign_name, NEW.budget_dkk,
                            NEW.start_date, NEW.end_date, NEW.status, NEW.external_reference,
                            NEW.created_at);
                RETURN NULL;
            END IF;
            -- Another table only when registered as serving orders.
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
            IF TG_RELID = '%1$I.partner_orders'::regclass::oid THEN
                -- The order as written, its fields as they are: the stamping renders it.
                INSERT INTO %1$I.partner_api_order_events
                        (organization_id, change, order_id, previous_providers,
                         new_providers, new_advertiser_name, new_campaign_name, new_budget_dkk,
                         new_start_date, new_end_date, new_status, new_external_reference,
                         new_created_at)
                    VALUES (NEW.organization_id,
                            CASE WHEN before IS NULL THEN 'order.created' ELSE 'order.updated' END,
                            NEW.id, before,
                            NEW.providers, NEW.advertiser_name, NEW.campaign_name, NEW.budget_dkk,
                            NEW.start_date, NEW.end_date, NEW.status, NEW.external_reference,
                            NEW.created_at);
                RETURN NULL;
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

    -- As in 20261210000001, and each event written with its order's fields gets its snapshot:
    -- the contract's checks, then a row of partner_api_order_snapshot turned to JSON whole, as
    -- the trigger made it before; NULL for an order the contract cannot show. The render never
    -- fails, whatever a writer wrote: a writer's row must not stop a feed, and a round of
    -- events is rendered in one statement. So what made the trigger's render fail (caught
    -- there) is checked first and unshowable: providers of more than one dimension
    -- (`array_position` refuses them), and text past what a jsonb value holds (2^28 bytes of
    -- strings, 2^28 elements; 250,000,000 bytes and 10,000,000 providers here).
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
                UPDATE %1$I.partner_api_order_events e
                    SET position = fresh.stamp, stamped_at = pg_catalog.clock_timestamp(),
                        order_row = CASE
                            WHEN e.new_created_at IS NULL THEN e.order_row
                            WHEN pg_catalog.array_ndims(e.new_providers) OPERATOR(pg_catalog.<>) 1 THEN NULL
                            WHEN pg_catalog.cardinality(e.new_providers) OPERATOR(pg_catalog.>) 10000000 THEN NULL
                            WHEN pg_catalog.octet_length(e.order_id::text)::pg_catalog.int8
                                 OPERATOR(pg_catalog.+) pg_catalog.octet_length(e.new_advertiser_name)::pg_catalog.int8
                                 OPERATOR(pg_catalog.+) pg_catalog.octet_length(e.new_campaign_name)::pg_catalog.int8
                                 OPERATOR(pg_catalog.+) pg_catalog.octet_length(e.new_status)::pg_catalog.int8
                                 OPERATOR(pg_catalog.+) pg_catalog.octet_length(e.new_external_reference)::pg_catalog.int8
                                 OPERATOR(pg_catalog.+) pg_catalog.octet_length(
                                     pg_catalog.array_to_string(e.new_providers, ''))::pg_catalog.int8
                                 OPERATOR(pg_catalog.>=) 250000000::pg_catalog.int8 THEN NULL
                            WHEN e.order_id::text IS NOT NULL AND e.new_providers IS NOT NULL
                             AND pg_catalog.array_position(e.new_providers, NULL) IS NULL
                             AND e.new_advertiser_name IS NOT NULL AND e.new_campaign_name IS NOT NULL
                             AND e.new_status IS NOT NULL AND e.new_external_reference IS NOT NULL
                             AND e.new_budget_dkk OPERATOR(pg_catalog.>=) 0::pg_catalog.int8
                             AND e.new_budget_dkk OPERATOR(pg_catalog.<=) 9007199254740991::pg_catalog.int8
                             AND e.new_start_date OPERATOR(pg_catalog.>=) '0001-01-01'::pg_catalog.date
                             AND e.new_start_date OPERATOR(pg_catalog.<) '10000-01-01'::pg_catalog.date
                             AND e.new_end_date OPERATOR(pg_catalog.>=) '0001-01-01'::pg_catalog.date
                             AND e.new_end_date OPERATOR(pg_catalog.<) '10000-01-01'::pg_catalog.date
                             AND e.new_created_at OPERATOR(pg_catalog.>=) '0001-01-01 00:00:00+00'::pg_catalog.timestamptz
                             AND e.new_created_at OPERATOR(pg_catalog.<) '10000-01-01 00:00:00+00'::pg_catalog.timestamptz
                            THEN pg_catalog.to_jsonb(ROW(
                                e.order_id::text, e.new_providers, e.new_advertiser_name, e.new_campaign_name, e.new_budget_dkk,
                                pg_catalog.to_char(e.new_start_date, 'YYYY-MM-DD'),
                                pg_catalog.to_char(e.new_end_date, 'YYYY-MM-DD'),
                                e.new_status, e.new_external_reference,
                                pg_catalog.to_char(e.new_created_at AT TIME ZONE 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::%1$I.partner_api_order_snapshot)
                        END,
                        new_providers = NULL, new_advertiser_name = NULL, new_campaign_name = NULL,
                        new_budget_dkk = NULL, new_start_date = NULL, new_end_date = NULL,
                        new_status = NULL, new_external_reference = NULL, new_created_at = NULL
                FROM fresh WHERE e.id = fresh.id
                RETURNING e.id, e.position, e.change, e.order_id, e.order_row, e.created_at,
                          e.previous_providers),
            heard AS (
                SELECT s.id AS event_id, s.order_id, s.order_row, s.created_at,
                       w.id AS endpoint_id, v.change
                FROM stamped s
                JOIN %1$I.partner_webhook_endpoints w
                  ON w.organization_id = org AND w.enabled AND s.created_at >= w.enabled_at
                CROSS JOIN LATERAL (
                    SELECT COALESCE(s.order_row OPERATOR(pg_catalog.->) 'providers'
                                    OPERATOR(pg_catalog.?|) w.providers, false) AS now_in) n
                CROSS JOIN LATERAL (
                    SELECT CASE WHEN s.previous_providers IS NOT NULL
                                THEN s.previous_providers OPERATOR(pg_catalog.?|) w.providers
                                ELSE s.change OPERATOR(pg_catalog.=) 'order.updated' AND n.now_in
                           END AS was_in) i
                CROSS JOIN LATERAL (
                    SELECT CASE WHEN w.providers IS NULL OR (n.now_in AND i.was_in) THEN s.change
                                WHEN n.now_in THEN 'order.created'
                                WHEN i.was_in THEN 'order.deleted' END AS change) v
                WHERE s.id > (SELECT b.after_event FROM %1$I.partner_api_webhooks_from b)
                  AND v.change IS NOT NULL
                  AND (pg_catalog.cardinality(w.events) = 0 OR v.change = ANY (w.events))),
            messages AS (
                INSERT INTO %1$I.partner_webhook_messages
                    (organization_id, event_type, order_id, order_row, event_id, raised_at)
                SELECT org, h.change, h.order_id,
                       CASE WHEN h.change OPERATOR(pg_catalog.=) 'order.deleted' THEN NULL
                            ELSE h.order_row END,
                       h.event_id, h.created_at
                FROM (SELECT DISTINCT ON (h.event_id, h.change) h.*
                      FROM heard h ORDER BY h.event_id, h.change) h
                ORDER BY h.event_id, h.change
                RETURNING id, event_id, event_type),
            deliveries AS (
                INSERT INTO %1$I.partner_webhook_deliveries (message_id, endpoint_id, order_id)
                SELECT m.id, h.endpoint_id, h.order_id
                FROM messages m
                JOIN heard h ON h.event_id = m.event_id AND h.change = m.event_type
                ORDER BY m.id, h.endpoint_id)
            SELECT pg_catalog.count(*), COALESCE(pg_catalog.max(s.position), last_stamped)
                INTO stamped_now, last_stamped
                FROM stamped s;
            UPDATE %1$I.partner_api_event_feeds SET last_position = last_stamped
                WHERE organization_id = org;
            RETURN stamped_now;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
