-- The events feed never stalls (#54):
-- 1. an event is rendered and checked when it is written, in UTC whatever the writer's
--    session says; an order the contract cannot show gets its event all the same, with no
--    snapshot (the reader serves its id and a mark), so no stored event fails a read;
-- 2. retention runs in bounded rounds that resume where the last one stopped;
-- 3. what retention deleted is remembered (tombstones), so a reader at a deleted event that
--    missed nothing resumes, one that missed events is told (410), and an id that was never
--    this feed's is a 400, on every store alike;
-- 4. no lock of ours is one a role outside the documented ones can take: row locks on tables
--    only the owner (and, for the organizations' locks, the key-managing role) may update,
--    instead of advisory locks any login can hold;
-- 5. TRUNCATE of a table whose orders we serve is refused (it would write no event);
-- 6. a read of some types costs what a read of every type does (an index per type).

-- Per organization, each batch retention deleted: the ids in feed order, the first one's
-- position (the others follow it), and when. Kept as long as events are, a day at least (the newest batch of
-- a feed for ever: it is where a caught-up reader resumes).
CREATE TABLE partner_api_pruned_events (
    organization_id TEXT NOT NULL,
    first_position  BIGINT NOT NULL,
    ids             BIGINT[] NOT NULL,
    min_id          BIGINT NOT NULL,
    max_id          BIGINT NOT NULL,
    pruned_at       TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (organization_id, first_position)
);
CREATE INDEX partner_api_pruned_events_ids ON partner_api_pruned_events (organization_id, max_id);

-- The position of the last event retention deleted (0: none). `pruned_through_id` stays as
-- the retention before this migration left it: an id at or below it that is gone, with no
-- tombstone, was deleted then.
ALTER TABLE partner_api_event_feeds ADD COLUMN pruned_through_position BIGINT NOT NULL DEFAULT 0;

-- One row: where the next retention call starts (the organization's id, '' for the first),
-- and, locked, the one retention call under way.
CREATE TABLE partner_api_event_retention (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    next_organization TEXT NOT NULL DEFAULT ''
);
INSERT INTO partner_api_event_retention DEFAULT VALUES;

-- The organizations' locks of key issuance and endpoint creation: a row locked by an upsert
-- until the transaction ends. Only the roles granted UPDATE here can take one.
CREATE TABLE partner_api_organization_locks (
    organization_id TEXT NOT NULL,
    purpose         TEXT NOT NULL CHECK (purpose IN ('keys', 'webhooks')),
    PRIMARY KEY (organization_id, purpose)
);

-- A read of some types walks each type's events in feed order.
CREATE INDEX partner_api_order_events_type_position
    ON partner_api_order_events (organization_id, change, position) WHERE position IS NOT NULL;

DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee_name name;
    served regclass;
BEGIN
    -- Each change of an order: its event in the feed always, and its webhook when enabled
    -- endpoints subscribe to it. The snapshot is the order in the contract's fields, checked
    -- and with its times in UTC here, whatever the writer's session says (to_char of the
    -- instant at UTC reads no session setting); NULL when the contract cannot show it (a
    -- budget above 2^53 - 1, a provider that is NULL, a date outside the years 1 to 9999, a
    -- column missing or of a type that does not convert, in a host's table): the event is
    -- written all the same, and the reader serves the order's id with a mark. Every operand
    -- of an operator is of the exact type of one of pg_catalog's (which is searched first),
    -- so no operator a role creates in this schema is ever the one called.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_raise_order_events() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            orgs text[];
            kinds text[];
            order_keys text[];
            shown jsonb;
            snapshot jsonb;
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
            ELSIF TG_OP = 'DELETE' THEN
                orgs := ARRAY[OLD.organization_id];
                kinds := ARRAY['order.deleted'];
                order_keys := ARRAY[OLD.id::text];
            ELSIF NEW.organization_id IS DISTINCT FROM OLD.organization_id
                  OR NEW.id IS DISTINCT FROM OLD.id THEN
                -- Moved: gone from where it was, new where it is.
                orgs := ARRAY[OLD.organization_id, NEW.organization_id];
                kinds := ARRAY['order.deleted', 'order.created'];
                order_keys := ARRAY[OLD.id::text, NEW.id::text];
            -- Rows compared as jsonb with pg_catalog's operator: a row type's `=` could be
            -- anyone's.
            ELSIF NOT (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.=) pg_catalog.to_jsonb(OLD)) THEN
                orgs := ARRAY[NEW.organization_id];
                kinds := ARRAY['order.updated'];
                order_keys := ARRAY[NEW.id::text];
            ELSE
                RETURN NULL;
            END IF;
            -- Rendered once the change is known to need it (not for a deletion or a write
            -- that changes nothing).
            IF TG_OP <> 'DELETE' THEN
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
            END IF;
            FOR i IN 1 .. pg_catalog.cardinality(kinds) LOOP
                snapshot := CASE WHEN kinds[i] = 'order.deleted' THEN NULL ELSE shown END;
                INSERT INTO %1$I.partner_api_order_events (organization_id, change, order_id, order_row)
                    VALUES (orgs[i], kinds[i], order_keys[i], snapshot)
                    RETURNING id, created_at INTO event, event_at;
                IF EXISTS (
                    SELECT 1 FROM %1$I.partner_webhook_endpoints e
                    WHERE e.organization_id = orgs[i] AND e.enabled
                      AND (pg_catalog.cardinality(e.events) = 0 OR kinds[i] = ANY (e.events))
                ) THEN
                    PERFORM %1$I.partner_api_raise_webhook(
                        orgs[i], kinds[i], order_keys[i], snapshot, event, event_at);
                END IF;
            END LOOP;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);

    -- A read of `org`'s feed, as before, but for an `after` that is gone: 'event' rows after
    -- it when it is the last event retention deleted (the reader missed nothing), 'expired'
    -- when retention deleted it and events after it, 'unknown' when it never was one of this
    -- feed's (or was deleted so long ago that its tombstone is gone too). A read of some types
    -- walks each type's index in feed order, so it costs what a read of every type does.
    EXECUTE format($sql$
        CREATE OR REPLACE FUNCTION %1$I.partner_api_read_order_events(
            org text, after_event bigint, max_events integer, kinds text[], check_unstamped boolean)
        RETURNS TABLE (outcome text, id bigint, change text, order_id text, order_row jsonb,
                       created_at timestamptz)
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            after_position bigint := 0;
            found_event boolean := false;
            pruned_position bigint;
            feed record;
            page_size integer := GREATEST(LEAST(max_events, 100), 1);
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
            IF pg_catalog.cardinality(kinds) >= 3 THEN
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

    -- Retention, one bounded call of a round: from the organization where the last call
    -- stopped, in id order, each organization's old events that no reader stamped get their
    -- positions, then its events written more than `keep_seconds` ago are deleted in feed
    -- order only (an old event behind a young one waits for it), never a feed's newest, each
    -- batch remembered as a tombstone (kept as long as events are and a day at least, the
    -- newest for ever);
    -- until `max_events` events were stamped or deleted, or `max_millis` passed, or the last
    -- organization was done (`done`: the next call starts from the first). The feed rows a
    -- call stamps or deletes in stay locked until it commits, so a reader's stamping waits for
    -- one call at most (its work is bounded, and it is one transaction). One call at a time: the retention row is locked (a role that may not update
    -- it cannot hold it); a call that cannot have it within two seconds fails, and says so.
    -- A role other than the owner's keeps at least a day, whatever it asks.
    EXECUTE format('DROP FUNCTION %1$I.partner_api_prune_order_events(bigint, integer)', schema_name);
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_prune_order_events(
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
                -- Old events no reader stamped: their positions first (in rounds of the
                -- stamper's, so one order's changes keep their order).
                SELECT e.created_at INTO oldest FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = org AND e.position IS NULL
                    ORDER BY e.id LIMIT 1;
                IF oldest < cutoff THEN
                    asked := LEAST(budget, 1000);
                    worked := %1$I.partner_api_stamp_order_events(org, asked::integer);
                    budget := budget - worked;
                    CONTINUE WHEN worked >= asked;
                END IF;
                -- The feed's oldest kept event: a probe; only a feed with an old one is locked.
                SELECT e.created_at INTO oldest FROM %1$I.partner_api_order_events e
                    WHERE e.organization_id = org AND e.position IS NOT NULL
                    ORDER BY e.position LIMIT 1;
                IF oldest < cutoff AND budget > 0 THEN
                    SELECT f.last_position INTO newest FROM %1$I.partner_api_event_feeds f
                        WHERE f.organization_id = org FOR UPDATE;
                    asked := budget;
                    WITH head AS (
                        SELECT e.id, e.position, e.created_at FROM %1$I.partner_api_order_events e
                        WHERE e.organization_id = org AND e.position IS NOT NULL
                          AND e.position < newest
                        ORDER BY e.position LIMIT asked),
                    first_young AS (
                        SELECT pg_catalog.min(h.position) AS position FROM head h
                        WHERE h.created_at >= cutoff),
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
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_prune_order_events(bigint, integer, integer) FROM PUBLIC',
                   schema_name);
    -- The roles that ran the old call (the serving role of the documented ones) run this one.
    FOR grantee_name IN
        SELECT DISTINCT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user
          AND pg_catalog.has_function_privilege(r.oid,
                format('%1$I.partner_api_read_order_events(text, bigint, integer, text[], boolean)', schema_name),
                'EXECUTE')
          AND NOT r.rolsuper AND r.rolname !~ '^pg_'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.partner_api_prune_order_events(bigint, integer, integer) TO %2$I',
                       schema_name, grantee_name);
    END LOOP;

    -- The roles that issue keys or add endpoints (the key-managing role of the documented
    -- ones) take the organizations' locks.
    FOR grantee_name IN
        SELECT DISTINCT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.rolname <> current_user AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND (pg_catalog.has_table_privilege(r.oid, format('%1$I.partner_api_keys', schema_name), 'INSERT')
               OR pg_catalog.has_table_privilege(r.oid, format('%1$I.partner_webhook_endpoints', schema_name), 'INSERT'))
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %1$I.partner_api_organization_locks TO %2$I',
                       schema_name, grantee_name);
    END LOOP;

    -- TRUNCATE would remove orders without their order.deleted events: refused, for
    -- partner_orders and every table registered with partner_api_serve_orders_table.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_refuse_truncate() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID <> '%1$I.partner_orders'::regclass::oid
               AND NOT %1$I.partner_api_serves_orders(TG_RELID) THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            RAISE EXCEPTION 'partner_api: TRUNCATE of %% would remove its orders without their order.deleted events; DELETE FROM it instead', TG_RELID::regclass
                USING ERRCODE = 'feature_not_supported';
        END
        $body$
    $sql$, schema_name);
    EXECUTE format('CREATE TRIGGER partner_orders_refuse_truncate BEFORE TRUNCATE ON %1$I.partner_orders '
                   'FOR EACH STATEMENT EXECUTE FUNCTION %1$I.partner_api_refuse_truncate()', schema_name);
    FOR served IN SELECT t.relid FROM partner_api_order_tables t LOOP
        EXECUTE format('CREATE TRIGGER partner_orders_refuse_truncate BEFORE TRUNCATE ON %2$s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION %1$I.partner_api_refuse_truncate()',
                       schema_name, served);
    END LOOP;

    -- Registering a table adds the refusal too.
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
                      '%1$I.partner_api_log_order_change()'::regprocedure::oid,
                      '%1$I.partner_api_raise_order_events()'::regprocedure::oid,
                      '%1$I.partner_api_notify_orders()'::regprocedure::oid,
                      '%1$I.partner_api_refuse_truncate()'::regprocedure::oid])
            LOOP
                EXECUTE pg_catalog.format('DROP TRIGGER %%I ON %%s', old_trigger, orders);
            END LOOP;
            EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_log '
                           'AFTER INSERT OR UPDATE OR DELETE ON %%s FOR EACH ROW '
                           'EXECUTE FUNCTION %1$I.partner_api_log_order_change()', orders);
            EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_refuse_truncate '
                           'BEFORE TRUNCATE ON %%s FOR EACH STATEMENT '
                           'EXECUTE FUNCTION %1$I.partner_api_refuse_truncate()', orders);
            IF webhooks THEN
                EXECUTE pg_catalog.format('CREATE TRIGGER partner_orders_webhooks '
                               'AFTER INSERT OR UPDATE OR DELETE ON %%s FOR EACH ROW '
                               'EXECUTE FUNCTION %1$I.partner_api_raise_order_events()', orders);
            END IF;
        END
        $body$
    $sql$, schema_name);
END
$migration$;
