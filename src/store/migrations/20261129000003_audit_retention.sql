-- Audit retention that every host can run, and that leaves a trace (#43). The documented
-- roles may not delete entries; this function, run with the owner's rights, deletes a batch
-- of the oldest entries and writes, for each organization that lost some, an `audit.pruned`
-- entry saying how many, in the same statement. Called by a role other than the owner, it
-- keeps at least 400 days (the default retention) whatever it is asked: a role that may run
-- it can make the log forget only what retention would have deleted anyway, never hide a
-- recent change. The owner's role may ask for any retention (standalone audit --prune).
DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_prune_audit(
            older_than_ms bigint, batch integer, actor text, source_address text,
            user_agent text, request_id text) RETURNS bigint
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            kept_ms bigint := older_than_ms;
            deleted bigint;
        BEGIN
            IF pg_catalog.lower(pg_catalog.btrim(pg_catalog.regexp_replace(actor, '\s+', ' ', 'g')))
                   OPERATOR(pg_catalog.=) ANY (ARRAY['webhook delivery', 'github secret scanning']) THEN
                RAISE EXCEPTION 'partner_api: the actor %% is the crate''s own', actor
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF NOT pg_catalog.pg_has_role(SESSION_USER,
                   (SELECT c.relowner FROM pg_catalog.pg_class c
                    WHERE c.oid OPERATOR(pg_catalog.=) '%1$I.partner_api_audit_log'::regclass::oid),
                   'MEMBER')
            THEN
                -- GREATEST and LEAST are syntax, not functions: nothing to qualify.
                kept_ms := GREATEST(kept_ms, 34560000000);
            END IF;
            -- A century at most: an interval PostgreSQL can subtract from now.
            kept_ms := LEAST(GREATEST(kept_ms, 0), 3153600000000);
            WITH gone AS (
                DELETE FROM %1$I.partner_api_audit_log a
                WHERE a.id OPERATOR(pg_catalog.=) ANY (ARRAY(
                    SELECT o.id FROM %1$I.partner_api_audit_log o
                    WHERE o.at OPERATOR(pg_catalog.<) (pg_catalog.now()
                          OPERATOR(pg_catalog.-) pg_catalog.make_interval(
                              secs => kept_ms::double precision OPERATOR(pg_catalog./) 1000))
                    ORDER BY o.at LIMIT GREATEST(batch, 0)))
                RETURNING a.organization_id),
            counted AS (
                SELECT g.organization_id, pg_catalog.count(*) AS n FROM gone g
                GROUP BY g.organization_id),
            logged AS (
                INSERT INTO %1$I.partner_api_audit_log
                    (organization_id, action, detail, actor, source_address, user_agent,
                     request_id)
                SELECT c.organization_id, 'audit.pruned', c.n::text,
                       pg_catalog.left(actor, 200), pg_catalog.left(source_address, 64),
                       pg_catalog.left(user_agent, 200), pg_catalog.left(request_id, 200)
                FROM counted c)
            SELECT COALESCE(pg_catalog.sum(c.n), 0)::bigint INTO deleted FROM counted c;
            RETURN deleted;
        END
        $body$
    $sql$, schema_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_prune_audit(bigint, integer, text, text, text, text) FROM PUBLIC',
                   schema_name);
END
$migration$;
