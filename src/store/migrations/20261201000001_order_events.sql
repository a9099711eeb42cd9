-- The events feed (GET /v1/events, #45): every order change, whether or not the organization
-- has a webhook endpoint, written by the webhooks' trigger in the same statement as the change.
--
-- An event's id is taken at insert; its position in its organization's feed only once it is
-- visible, by one stamper at a time per organization (the feed's row, locked), in id order,
-- above every position before. Writers commit out of order, so an id is no place to resume
-- from; a position is: whatever a reader saw was stamped in an earlier round, and every later
-- round stamps above it. One order's later change is written after its earlier one committed
-- (the row lock), so it has the larger id, and whenever it is visible the earlier one is too:
-- each order's events are stamped in commit order. (src/store/events.rs gives the argument in
-- full.) Retention deletes in position order only, so a feed keeps a suffix of itself.
CREATE TABLE partner_api_order_events (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id TEXT NOT NULL,
    change          TEXT NOT NULL
                    CHECK (change IN ('order.created', 'order.updated', 'order.deleted')),
    order_id        TEXT COLLATE "C" NOT NULL,
    -- The order as written (to_jsonb of the row); NULL for a deletion.
    order_row       JSONB,
    created_at      TIMESTAMPTZ(3) NOT NULL DEFAULT clock_timestamp(),
    -- Set once, by the stamper; NULL until the event is part of the feed.
    position        BIGINT
);
CREATE UNIQUE INDEX partner_api_order_events_position
    ON partner_api_order_events (organization_id, position) WHERE position IS NOT NULL;
CREATE INDEX partner_api_order_events_unstamped
    ON partner_api_order_events (organization_id, id) WHERE position IS NULL;

-- Per organization: the last position handed out (its row is the stamper's lock), and the
-- largest event id retention deleted (an id at or below it that is gone was pruned).
CREATE TABLE partner_api_event_feeds (
    organization_id   TEXT PRIMARY KEY,
    last_position     BIGINT NOT NULL DEFAULT 0,
    pruned_through_id BIGINT NOT NULL DEFAULT 0
);

-- A webhook names its event.
ALTER TABLE partner_webhook_messages ADD COLUMN event_id BIGINT;

-- Usage counts the feed's requests.
ALTER TABLE partner_api_key_usage DROP CONSTRAINT partner_api_key_usage_route_check;
ALTER TABLE partner_api_key_usage
    ADD CONSTRAINT partner_api_key_usage_route_check CHECK (route IN ('/me', '/orders', '/events'));

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- The webhook part of one change: its message and deliveries, for the enabled endpoints
    -- of the organization subscribed to its type (the trigger calls it only when there are
    -- any). Replaces partner_api_raise_order_event, which wrote no event.
    EXECUTE format('DROP FUNCTION %1$I.partner_api_raise_order_event(text, text, text, jsonb)',
                   schema_name);
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_raise_webhook(
            org text, kind text, order_key text, snapshot jsonb, event bigint, event_at timestamptz)
        RETURNS void LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            message bigint;
        BEGIN
            INSERT INTO %1$I.partner_webhook_messages
                    (organization_id, event_type, order_id, order_row, event_id, raised_at)
                VALUES (org, kind, order_key, snapshot, event, event_at)
                RETURNING id INTO message;
            INSERT INTO %1$I.partner_webhook_deliveries (message_id, endpoint_id, order_id)
                SELECT message, e.id, order_key FROM %1$I.partner_webhook_endpoints e
                WHERE e.organization_id = org AND e.enabled
                  AND (pg_catalog.cardinality(e.events) = 0 OR kind = ANY (e.events));
        END
        $body$
    $sql$, schema_name);

    -- Each change of an order: its event in the feed always, and its webhook when enabled
    -- endpoints subscribe to it. One function call per row, its statements inline: a call of
    -- a function with its own search path costs a configuration change, which measured as
    -- much as the event's insert itself (benches/order_writes.sh).
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_events() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            orgs text[];
            kinds text[];
            order_keys text[];
            snapshots jsonb[];
            event bigint;
            event_at timestamptz;
            i integer;
        BEGIN
            -- partner_orders without a call: the order writes' common case.
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF TG_OP = 'INSERT' THEN
                orgs := ARRAY[NEW.organization_id];
                kinds := ARRAY['order.created'];
                order_keys := ARRAY[NEW.id::text];
                snapshots := ARRAY[pg_catalog.to_jsonb(NEW)];
            ELSIF TG_OP = 'DELETE' THEN
                orgs := ARRAY[OLD.organization_id];
                kinds := ARRAY['order.deleted'];
                order_keys := ARRAY[OLD.id::text];
                snapshots := ARRAY[NULL::jsonb];
            ELSIF NEW.organization_id IS DISTINCT FROM OLD.organization_id
                  OR NEW.id IS DISTINCT FROM OLD.id THEN
                -- Moved: gone from where it was, new where it is.
                orgs := ARRAY[OLD.organization_id, NEW.organization_id];
                kinds := ARRAY['order.deleted', 'order.created'];
                order_keys := ARRAY[OLD.id::text, NEW.id::text];
                snapshots := ARRAY[NULL::jsonb, pg_catalog.to_jsonb(NEW)];
            -- Rows compared as jsonb with pg_catalog's operator: a row type's `=` could be
            -- anyone's.
            ELSIF NOT (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.=) pg_catalog.to_jsonb(OLD)) THEN
                orgs := ARRAY[NEW.organization_id];
                kinds := ARRAY['order.updated'];
                order_keys := ARRAY[NEW.id::text];
                snapshots := ARRAY[pg_catalog.to_jsonb(NEW)];
            ELSE
                RETURN NULL;
            END IF;
            FOR i IN 1 .. pg_catalog.cardinality(kinds) LOOP
                INSERT INTO %1$I.partner_api_order_events (organization_id, change, order_id, order_row)
                    VALUES (orgs[i], kinds[i], order_keys[i], snapshots[i])
                    RETURNING id, created_at INTO event, event_at;
                IF EXISTS (
                    SELECT 1 FROM %1$I.partner_webhook_endpoints e
                    WHERE e.organization_id = orgs[i] AND e.enabled
                      AND (pg_catalog.cardinality(e.events) = 0 OR kinds[i] = ANY (e.events))
                ) THEN
                    PERFORM %1$I.partner_api_raise_webhook(
                        orgs[i], kinds[i], order_keys[i], snapshots[i], event, event_at);
                END IF;
            END LOOP;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    -- One stamping round for `org`: the events visible now that have no position, at most
    -- `max_events` of the lowest ids, get the next positions, in id order. The feed's row is
    -- locked first, so rounds of one organization run one at a time, and each statement after
    -- the lock sees the last round's stamps (READ COMMITTED, the default: under a stricter
    -- level a concurrent round fails with a serialization error instead). Stamping the lowest
    -- ids first keeps one order's earlier change before its later one. Returns how many it
    -- stamped.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_stamp_order_events(org text, max_events integer) RETURNS bigint
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
                RETURNING e.position)
            SELECT pg_catalog.count(*), COALESCE(pg_catalog.max(s.position), last_stamped)
                INTO stamped_now, last_stamped
                FROM stamped s;
            UPDATE %1$I.partner_api_event_feeds SET last_position = last_stamped
                WHERE organization_id = org;
            RETURN stamped_now;
        END
        $body$
    $sql$, schema_name);

    -- A read of `org`'s feed: the events after the event `after_event` (NULL: from the oldest
    -- kept) of the types `kinds`, at most `max_events`, in feed order, each as outcome
    -- 'event'; or one row only: 'expired' (the event was pruned), 'unknown' (it is none of
    -- this feed's), or, when `check_unstamped` and the feed has events without a position,
    -- 'unstamped' (stamp, then read again without the check); then one row 'through', the newest
    -- event after the position, of any type, if there is one. Reads only: a position is
    -- handed out by the stamper's own committed transaction, never by a read whose commit
    -- could fail after its rows were sent.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_read_order_events(
            org text, after_event bigint, max_events integer, kinds text[], check_unstamped boolean)
        RETURNS TABLE (outcome text, id bigint, change text, order_id text, order_row jsonb,
                       created_at timestamptz)
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            after_position bigint := 0;
            found_event boolean := false;
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
                    outcome := CASE WHEN after_event <= COALESCE(
                            (SELECT f.pruned_through_id FROM %1$I.partner_api_event_feeds f
                             WHERE f.organization_id = org), 0)
                        THEN 'expired' ELSE 'unknown' END;
                    RETURN NEXT;
                    RETURN;
                END IF;
                IF after_position IS NULL THEN
                    outcome := 'unstamped';
                    RETURN NEXT;
                    RETURN;
                END IF;
            END IF;
            RETURN QUERY
                SELECT 'event'::text, e.id, e.change, e.order_id::text, e.order_row,
                       e.created_at::timestamptz
                FROM %1$I.partner_api_order_events e
                WHERE e.organization_id = org AND e.position > after_position
                  AND e.change = ANY (kinds)
                ORDER BY e.position
                LIMIT GREATEST(LEAST(max_events, 100), 1);
            -- The newest event after the position, of any type: where a reader whose page
            -- is not full resumes, past the events of types it did not ask for.
            RETURN QUERY
                SELECT 'through'::text, e.id, NULL::text, NULL::text, NULL::jsonb,
                       NULL::timestamptz
                FROM %1$I.partner_api_order_events e
                WHERE e.organization_id = org AND e.position > after_position
                ORDER BY e.position DESC
                LIMIT 1;
        END
        $body$
    $sql$, schema_name);

    -- Retention: deletes at most `max_events` events written more than `keep_seconds` ago,
    -- in feed order only (an old event behind a young one waits for it), and never a feed's
    -- newest event (a reader that has it resumes there, however quiet the feed: it missed
    -- nothing). Old events no reader stamped yet get their positions first. Each feed's row
    -- is locked while its events are deleted, so no stamping round adds positions between
    -- finding the first young event and deleting what comes before it. One round at a time:
    -- a round that finds another under way deletes nothing. A role other than the owner's
    -- keeps at least a day, whatever it asks (the serving role runs it).
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_prune_order_events(keep_seconds bigint, max_events integer)
        RETURNS bigint
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            kept bigint := LEAST(GREATEST(keep_seconds, 0), 3153600000);
            cutoff timestamptz;
            feed record;
            first_young bigint;
            newest bigint;
            gone bigint;
            top bigint;
            deleted bigint := 0;
        BEGIN
            IF NOT pg_catalog.pg_try_advisory_xact_lock(
                pg_catalog.hashtextextended('partner_api_prune_order_events', 0)) THEN
                RETURN 0;
            END IF;
            IF NOT pg_catalog.pg_has_role(SESSION_USER,
                   (SELECT c.relowner FROM pg_catalog.pg_class c
                    WHERE c.oid OPERATOR(pg_catalog.=) '%1$I.partner_api_order_events'::regclass::oid),
                   'MEMBER')
            THEN
                kept := GREATEST(kept, 86400);
            END IF;
            cutoff := pg_catalog.clock_timestamp()
                - pg_catalog.make_interval(secs => kept::double precision);
            FOR feed IN
                SELECT DISTINCT e.organization_id FROM %1$I.partner_api_order_events e
                WHERE e.position IS NULL AND e.created_at < cutoff
                ORDER BY e.organization_id
            LOOP
                EXIT WHEN deleted >= max_events;
                PERFORM %1$I.partner_api_stamp_order_events(feed.organization_id, max_events);
            END LOOP;
            FOR feed IN
                SELECT f.organization_id FROM %1$I.partner_api_event_feeds f
                ORDER BY f.organization_id
            LOOP
                EXIT WHEN deleted >= max_events;
                SELECT f.last_position INTO newest FROM %1$I.partner_api_event_feeds f
                    WHERE f.organization_id = feed.organization_id FOR UPDATE;
                SELECT e.position INTO first_young FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = feed.organization_id AND e.position IS NOT NULL
                      AND e.created_at >= cutoff
                    ORDER BY e.position LIMIT 1;
                WITH doomed AS (
                    SELECT e.id FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = feed.organization_id AND e.position IS NOT NULL
                      AND e.position < COALESCE(first_young, newest)
                    ORDER BY e.position LIMIT max_events - deleted),
                gone_rows AS (
                    DELETE FROM %1$I.partner_api_order_events e USING doomed d
                    WHERE e.id = d.id RETURNING e.id)
                SELECT pg_catalog.count(*), pg_catalog.max(g.id) INTO gone, top FROM gone_rows g;
                IF gone > 0 THEN
                    UPDATE %1$I.partner_api_event_feeds
                        SET pruned_through_id = GREATEST(pruned_through_id, top)
                        WHERE organization_id = feed.organization_id;
                    deleted := deleted + gone;
                END IF;
            END LOOP;
            RETURN deleted;
        END
        $body$
    $sql$, schema_name);

    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_raise_webhook(text, text, text, jsonb, bigint, timestamptz) FROM PUBLIC',
                   schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_stamp_order_events(text, integer) FROM PUBLIC',
                   schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_read_order_events(text, bigint, integer, text[], boolean) FROM PUBLIC',
                   schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_prune_order_events(bigint, integer) FROM PUBLIC',
                   schema_name);
END
$migration$;
