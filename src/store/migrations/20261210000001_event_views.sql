-- The events feed in a key's view (#58): a key limited to providers reads the events of the
-- orders it may see, and an order that comes into its view or leaves it is, for that key, a
-- creation or a deletion. For that every event records the providers the order had *before*
-- the change, as the feed showed it, at write time: `previous_providers`, a JSON array (`[]`
-- when the order before could not be shown in the contract's form: no view saw it then),
-- NULL for a creation (nothing before) and for the events written before this migration.
--
-- One order's events chain exactly: its changes are serialized by the row lock, so each
-- event's `previous_providers` is the `order_row->'providers'` of the order's event before it
-- (or `[]` when that was unshowable or a deletion). So the type in a view, taken from whether
-- the order was in the view before and is after (below), gives every view a history of the
-- order that is itself well formed: created, updated while in view, deleted, created again.
--
--   in before | in after | the event in the view
--   no        | no       | none
--   no        | yes      | order.created (the order as after the change)
--   yes       | no       | order.deleted ({"id"} only)
--   yes       | yes      | the change itself
--
-- The events written before this migration get theirs here, from the order's event before
-- them in their feed (the chain above, read backwards): its order's providers, `[]` after a
-- deletion or an unshowable order; an event whose order has no event kept before it (retention
-- deleted it) takes, for an update, its own providers (a view that sees the order after sees
-- an update, as a reader that starts there), and for a deletion `[]` (in no view). An event
-- written later without a record (by a host table's trigger not registered again since, or
-- by a replica of the version before during an upgrade) is read the same way: an update's
-- before as its after, a deletion in no view.
ALTER TABLE partner_api_order_events ADD COLUMN previous_providers JSONB;

-- A webhook endpoint may be limited to providers as a key is: it hears of the events of its
-- view, each with its type in the view (the same table). NULL: every order.
ALTER TABLE partner_webhook_endpoints ADD COLUMN providers TEXT[]
    CHECK (providers IS NULL OR pg_catalog.cardinality(providers) BETWEEN 1 AND 50);

DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee_name name;
    served regclass;
BEGIN
    -- The order writes wait for this migration: a write under way has committed, with the
    -- trigger of before, when the lock is held; one after it records its before.
    EXECUTE format('LOCK TABLE %1$I.partner_orders IN SHARE ROW EXCLUSIVE MODE', schema_name);
    FOR served IN SELECT t.relid FROM partner_api_order_tables t LOOP
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', served);
    END LOOP;

    -- The events written before: each update's and deletion's before, from its order's event
    -- before it in its feed (ids follow one order's commits: its row lock).
    EXECUTE format($sql$
        UPDATE %1$I.partner_api_order_events e SET previous_providers = b.before
        FROM (
            SELECT x.id,
                   CASE WHEN x.previous_change IS NULL AND x.change = 'order.updated'
                            THEN COALESCE(x.order_row -> 'providers', '[]'::jsonb)
                        WHEN x.previous_change IS NULL OR x.previous_change = 'order.deleted'
                            THEN '[]'::jsonb
                        ELSE COALESCE(x.previous_row -> 'providers', '[]'::jsonb) END AS before
            FROM (
                SELECT p.id, p.change, p.order_row,
                       pg_catalog.lag(p.change) OVER w AS previous_change,
                       pg_catalog.lag(p.order_row) OVER w AS previous_row
                FROM %1$I.partner_api_order_events p
                WINDOW w AS (PARTITION BY p.organization_id, p.order_id ORDER BY p.id)) x
            WHERE x.change <> 'order.created') b
        WHERE e.id = b.id
    $sql$, schema_name);

    -- As in 20261204000001, and each update's or deletion's event records the providers of
    -- the order before it, when the order before was shown (`[]` when it was not).
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
            INSERT INTO %1$I.partner_api_order_events
                    (organization_id, change, order_id, order_row, previous_providers)
                VALUES (NEW.organization_id,
                        CASE WHEN before IS NULL THEN 'order.created' ELSE 'order.updated' END,
                        NEW.id::text, shown, before);
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    -- As in 20261209000001, and each endpoint hears of the events in its view, each with its
    -- type there (for an endpoint limited to providers: the table above, as the feed's read
    -- below works it out): a message per event and type heard, a delivery per endpoint.
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
                    SET position = fresh.stamp, stamped_at = pg_catalog.clock_timestamp()
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

    -- A read of `org`'s feed as in 20261203000001 (its position checks and its read of every
    -- order unchanged, for `view` NULL), or in the view of the providers `view`: such a read
    -- looks at `max_looked_at` events of the feed at most (in position order, each checked
    -- against the view), keeps those in the view with their type in it (the table above), of
    -- the types asked, up to the page; its 'through' row is the last event it looked at, so a
    -- reader of a rare provider moves on at a bounded cost a read.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_read_order_events(
            org text, after_event bigint, max_events integer, kinds text[], check_unstamped boolean,
            view text[], max_looked_at integer)
        RETURNS TABLE (outcome text, id bigint, change text, order_id text, order_row jsonb,
                       created_at timestamptz)
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            after_position bigint := 0;
            found_event boolean := false;
            pruned_position bigint;
            feed record;
            page_size integer := GREATEST(LEAST(max_events, 100), 1);
            -- At most 1,000 events, whatever the caller asks: the read runs as the owner.
            looked_at_most integer := LEAST(GREATEST(max_looked_at, page_size), 1000);
            returned bigint;
        BEGIN
            IF check_unstamped AND EXISTS (
                SELECT 1 FROM %1$I.partner_api_order_events u
                WHERE u.organization_id = org AND u.position IS NULL
            ) THEN
                outcome := 'unstamped';
                RETURN NEXT;
                RETURN;
            END IF;
            IF after_event IS NOT NULL THEN
                SELECT e.position, true INTO after_position, found_event
                    FROM %1$I.partner_api_order_events e
                    WHERE e.id = after_event AND e.organization_id = org;
                IF NOT COALESCE(found_event, false) THEN
                    SELECT p.first_position + pg_catalog.array_position(p.ids, after_event) - 1
                        INTO pruned_position
                        FROM %1$I.partner_api_pruned_events p
                        WHERE p.organization_id = org AND p.max_id >= after_event
                          AND p.min_id <= after_event AND after_event = ANY (p.ids)
                        LIMIT 1;
                    SELECT f.pruned_through_position, f.pruned_through_id INTO feed
                        FROM %1$I.partner_api_event_feeds f WHERE f.organization_id = org;
                    IF pruned_position IS NULL THEN
                        outcome := CASE WHEN after_event > 0
                                AND after_event <= COALESCE(feed.pruned_through_id, 0)
                            THEN 'expired' ELSE 'unknown' END;
                        RETURN NEXT;
                        RETURN;
                    END IF;
                    IF pruned_position < feed.pruned_through_position THEN
                        outcome := 'expired';
                        RETURN NEXT;
                        RETURN;
                    END IF;
                    after_position := pruned_position;
                ELSIF after_position IS NULL THEN
                    outcome := 'unstamped';
                    RETURN NEXT;
                    RETURN;
                END IF;
            END IF;
            IF view IS NOT NULL THEN
                -- The page: the feed's events in position order, at most max_looked_at of
                -- them, each with its type in the view; the scan stops once the page is full.
                RETURN QUERY
                    SELECT 'event'::text, v.id, v.change, v.order_id::text,
                           CASE WHEN v.change OPERATOR(pg_catalog.=) 'order.deleted' THEN NULL
                                ELSE v.order_row END,
                           v.created_at::timestamptz
                    FROM (
                        SELECT l.id, l.order_id, l.order_row, l.created_at, l.position,
                               CASE WHEN l.now_in AND l.was_in THEN l.change
                                    WHEN l.now_in THEN 'order.created'
                                    WHEN l.was_in THEN 'order.deleted' END AS change
                        FROM (
                            SELECT e.id, e.change, e.order_id, e.order_row, e.created_at,
                                   e.position,
                                   COALESCE(e.order_row OPERATOR(pg_catalog.->) 'providers'
                                            OPERATOR(pg_catalog.?|) view, false) AS now_in,
                                   CASE WHEN e.previous_providers IS NOT NULL
                                        THEN e.previous_providers OPERATOR(pg_catalog.?|) view
                                        -- Written before views: an update's before as its
                                        -- after.
                                        ELSE e.change OPERATOR(pg_catalog.=) 'order.updated'
                                             AND COALESCE(e.order_row OPERATOR(pg_catalog.->) 'providers'
                                                          OPERATOR(pg_catalog.?|) view, false)
                                   END AS was_in
                            FROM %1$I.partner_api_order_events e
                            WHERE e.organization_id = org AND e.position > after_position
                            ORDER BY e.position
                            LIMIT looked_at_most) l
                        WHERE l.now_in OR l.was_in) v
                    WHERE v.change OPERATOR(pg_catalog.=) ANY (kinds)
                    ORDER BY v.position
                    LIMIT page_size;
                GET DIAGNOSTICS returned = ROW_COUNT;
                IF returned < page_size THEN
                    -- The last event looked at: where a reader whose page is not full
                    -- resumes.
                    RETURN QUERY
                        SELECT 'through'::text, l.id, NULL::text, NULL::text, NULL::jsonb,
                               NULL::timestamptz
                        FROM (SELECT e.id, e.position FROM %1$I.partner_api_order_events e
                              WHERE e.organization_id = org AND e.position > after_position
                              ORDER BY e.position
                              LIMIT looked_at_most) l
                        ORDER BY l.position DESC
                        LIMIT 1;
                END IF;
            ELSIF pg_catalog.cardinality(kinds) >= 3 THEN
                RETURN QUERY
                    SELECT 'event'::text, e.id, e.change, e.order_id::text, e.order_row,
                           e.created_at::timestamptz
                    FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = org AND e.position > after_position
                    ORDER BY e.position
                    LIMIT page_size;
            ELSE
                RETURN QUERY
                    SELECT 'event'::text, e.id, e.change, e.order_id::text, e.order_row,
                           e.created_at::timestamptz
                    FROM pg_catalog.unnest(kinds) AS k(kind)
                    CROSS JOIN LATERAL (
                        SELECT t.id, t.change, t.order_id, t.order_row, t.created_at, t.position
                        FROM %1$I.partner_api_order_events t
                        WHERE t.organization_id = org AND t.change = k.kind
                          AND t.position > after_position
                        ORDER BY t.position
                        LIMIT page_size) e
                    ORDER BY e.position
                    LIMIT page_size;
            END IF;
            IF view IS NULL THEN
                -- The newest event after the position, of any type: where a reader whose
                -- page is not full resumes, past the events of types it did not ask for.
                RETURN QUERY
                    SELECT 'through'::text, e.id, NULL::text, NULL::text, NULL::jsonb,
                           NULL::timestamptz
                    FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = org AND e.position > after_position
                    ORDER BY e.position DESC
                    LIMIT 1;
            END IF;
        END
        $body$
    $sql$, schema_name);
    -- The read of before, for the replicas of the version before during an upgrade (their
    -- roles get the new read below): the read of every order, as its caller (no longer as
    -- the owner: the read it calls is).
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_read_order_events(
            org text, after_event bigint, max_events integer, kinds text[], check_unstamped boolean)
        RETURNS TABLE (outcome text, id bigint, change text, order_id text, order_row jsonb,
                       created_at timestamptz)
        LANGUAGE sql STABLE SECURITY INVOKER SET search_path = %1$I, pg_temp AS $body$
            SELECT * FROM %1$I.partner_api_read_order_events(
                org, after_event, max_events, kinds, check_unstamped, NULL::text[], 0)
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_read_order_events(text, bigint, integer, text[], boolean, text[], integer) FROM PUBLIC',
                   schema_name);
    -- The roles that read the feed (the serving role of the documented ones) read its views.
    FOR grantee_name IN
        SELECT DISTINCT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user
          AND pg_catalog.has_function_privilege(r.oid,
                format('%1$I.partner_api_read_order_events(text, bigint, integer, text[], boolean)', schema_name),
                'EXECUTE')
          AND NOT r.rolsuper AND r.rolname !~ '^pg_'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.partner_api_read_order_events(text, bigint, integer, text[], boolean, text[], integer) TO %2$I',
                       schema_name, grantee_name);
    END LOOP;
END
$migration$;
