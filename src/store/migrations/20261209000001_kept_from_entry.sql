-- An event is kept for the retention period from when it became part of the feed (its
-- position handed out), not from when it was written. The two differ by as long as an event
-- waits to be readable: a writer's long transaction, or the capture's lag (a captured event's
-- `created_at` is its commit's time, and it is written when the capture reads it). Counting
-- from the write, retention stamped an event that came later than the retention period and
-- deleted it in the same call, before any reader could see it: every reader was told 410,
-- however often it read. Counting from the position, the invariant is exact in the one
-- quantity a reader controls:
--
--   a reader that reads its feed to the end at least once every retention period (less the
--   time a stamping statement takes to commit after its clock reading) is never told 410.
--
-- Argument: retention deletes an event only when its `stamped_at` is older than the period;
-- `stamped_at` is read by the statement that hands the position out, after it holds the
-- feed's lock, and the position is readable from that statement's commit. A read that began
-- after that commit and read to the end returned the event (retention deletes a prefix of the
-- feed, so the reader's position is before it or is it).
--
-- Events stamped before this migration have no `stamped_at`: their `created_at` stands in, as
-- before. Retention stamps every event that no reader stamped when it sees it, young or old
-- (before, only those older than the period): a feed nobody reads is pruned all the same,
-- about a period and a round after its writes, and an event that came late is kept a period
-- from when it came.
--
-- Microseconds, as the cutoff it is compared with: rounded to milliseconds, an event stamped
-- in a call could look older than the call.
ALTER TABLE partner_api_order_events ADD COLUMN stamped_at TIMESTAMPTZ;

DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    -- As in 20261204000001, and each stamped event's time of entry into the feed.
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

    -- As in 20261203000001, with each event's age counted from its entry into the feed.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_prune_order_events(
            keep_seconds bigint, max_events integer, max_millis integer)
        RETURNS TABLE (deleted bigint, done boolean)
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp SET lock_timeout = '2s'
        AS $body$
        DECLARE
            kept bigint := LEAST(GREATEST(keep_seconds, 0), 3153600000);
            budget bigint := GREATEST(max_events, 1);
            started timestamptz := pg_catalog.clock_timestamp();
            cutoff timestamptz;
            tombstones_cutoff timestamptz;
            org text;
            oldest timestamptz;
            asked bigint;
            worked bigint;
            newest bigint;
            gone bigint;
            gone_first bigint;
            gone_last bigint;
        BEGIN
            deleted := 0;
            done := false;
            SELECT r.next_organization INTO org FROM %1$I.partner_api_event_retention r FOR UPDATE;
            IF NOT pg_catalog.pg_has_role(SESSION_USER,
                   (SELECT c.relowner FROM pg_catalog.pg_class c
                    WHERE c.oid OPERATOR(pg_catalog.=) '%1$I.partner_api_order_events'::regclass::oid),
                   'MEMBER')
            THEN
                kept := GREATEST(kept, 86400);
            END IF;
            cutoff := pg_catalog.clock_timestamp()
                - pg_catalog.make_interval(secs => kept::double precision);
            tombstones_cutoff := pg_catalog.clock_timestamp()
                - pg_catalog.make_interval(secs => GREATEST(kept, 86400)::double precision);
            -- The first organization at or after the cursor with a feed or unstamped events:
            -- two index probes.
            org := LEAST(
                (SELECT pg_catalog.min(f.organization_id) FROM %1$I.partner_api_event_feeds f
                 WHERE f.organization_id >= org),
                (SELECT pg_catalog.min(e.organization_id) FROM %1$I.partner_api_order_events e
                 WHERE e.position IS NULL AND e.organization_id >= org));
            LOOP
                IF org IS NULL THEN
                    done := true;
                    org := '';
                    EXIT;
                END IF;
                EXIT WHEN budget <= 0
                    OR pg_catalog.clock_timestamp() - started
                       > pg_catalog.make_interval(
                           secs => GREATEST(max_millis, 1)::double precision / 1000::double precision);
                -- Events no reader stamped yet, however young: their positions first (in
                -- rounds of the stamper's, so one order's changes keep their order). Retention
                -- is the observer of last resort: an event it sees is readable from now, and
                -- is kept a period from now, so a feed nobody reads is pruned about a period
                -- (and a round) after its writes.
                SELECT e.created_at INTO oldest FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = org AND e.position IS NULL
                    ORDER BY e.id LIMIT 1;
                IF oldest IS NOT NULL THEN
                    asked := LEAST(budget, 1000);
                    worked := %1$I.partner_api_stamp_order_events(org, asked::integer);
                    budget := budget - worked;
                    CONTINUE WHEN worked >= asked;
                END IF;
                -- The feed's oldest kept event: a probe; only a feed with an old one is locked.
                SELECT COALESCE(e.stamped_at, e.created_at) INTO oldest
                    FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = org AND e.position IS NOT NULL
                    ORDER BY e.position LIMIT 1;
                IF oldest < cutoff AND budget > 0 THEN
                    SELECT f.last_position INTO newest FROM %1$I.partner_api_event_feeds f
                        WHERE f.organization_id = org FOR UPDATE;
                    asked := budget;
                    WITH head AS (
                        SELECT e.id, e.position, COALESCE(e.stamped_at, e.created_at) AS entered_at
                        FROM %1$I.partner_api_order_events e
                        WHERE e.organization_id = org AND e.position IS NOT NULL
                          AND e.position < newest
                        ORDER BY e.position LIMIT asked),
                    first_young AS (
                        SELECT pg_catalog.min(h.position) AS position FROM head h
                        WHERE h.entered_at >= cutoff),
                    doomed AS (
                        SELECT h.id FROM head h, first_young y
                        WHERE y.position IS NULL OR h.position < y.position),
                    gone_rows AS (
                        DELETE FROM %1$I.partner_api_order_events e USING doomed d
                        WHERE e.id = d.id RETURNING e.id, e.position),
                    tombstone AS (
                        INSERT INTO %1$I.partner_api_pruned_events
                            (organization_id, first_position, ids, min_id, max_id)
                        SELECT org, pg_catalog.min(g.position),
                               pg_catalog.array_agg(g.id ORDER BY g.position),
                               pg_catalog.min(g.id), pg_catalog.max(g.id)
                        FROM gone_rows g HAVING pg_catalog.count(*) > 0
                        RETURNING first_position, pg_catalog.cardinality(ids) AS count)
                    SELECT t.count, t.first_position INTO gone, gone_first FROM tombstone t;
                    gone := COALESCE(gone, 0);
                    IF gone > 0 THEN
                        gone_last := gone_first + gone - 1;
                        UPDATE %1$I.partner_api_event_feeds
                            SET pruned_through_position = gone_last
                            WHERE organization_id = org;
                        -- Tombstones kept as long as events are (a day at least) go, but
                        -- the newest.
                        DELETE FROM %1$I.partner_api_pruned_events p
                            WHERE p.organization_id = org AND p.pruned_at < tombstones_cutoff
                              AND p.first_position < gone_first;
                        deleted := deleted + gone;
                        budget := budget - gone;
                    END IF;
                    CONTINUE WHEN gone >= asked;
                END IF;
                -- This organization is done: the next.
                org := LEAST(
                    (SELECT pg_catalog.min(f.organization_id) FROM %1$I.partner_api_event_feeds f
                     WHERE f.organization_id > org),
                    (SELECT pg_catalog.min(e.organization_id) FROM %1$I.partner_api_order_events e
                     WHERE e.position IS NULL AND e.organization_id > org));
            END LOOP;
            UPDATE %1$I.partner_api_event_retention SET next_organization = org;
            RETURN NEXT;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
