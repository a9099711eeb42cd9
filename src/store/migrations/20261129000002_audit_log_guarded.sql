-- The audit log cannot be forged by the documented roles (#43).
--
-- 1. An entry's id and time are the database's: the key-management role's INSERT is granted
--    on the other columns only (docs::hosting, the roles), so neither an id ahead of the
--    sequence (which made later audited changes fail on a unique violation) nor a time (a
--    backdated entry, 'infinity') can be given.
-- 2. The actors of the crate's automatic changes are the crate's: `webhook delivery` and
--    `github secret scanning` are written only by the triggers below and the delivery one,
--    which run as the owner; an INSERT by any other role that names them is refused.
-- 3. A key reported leaked gets its entry from a trigger, as an endpoint delivery disables
--    does: the most a role can make the log say is that a key was reported leaked, and only
--    by marking it so (leak_reported_at), which it may do anyway, once per key.
-- 4. An endpoint is enabled only by a role that may add endpoints: the delivering role may
--    disable (410 Gone, failing), never enable.
-- 5. A deployment that granted INSERT on the whole table (as the hosting page said before)
--    has each such grant narrowed to the columns here, so the upgrade closes the hole without
--    an operator's step; and the webhook URLs earlier `webhook.added` entries kept whole (a
--    receiver's token rides in a path or query) are cut to their scheme, host and port.
DO $migration$
DECLARE
    schema_name text := current_schema();
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT pg_catalog.quote_ident(r.rolname::text)
        FROM pg_catalog.pg_class c
        CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
        JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
        WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.format('%I.partner_api_audit_log', schema_name)::regclass::oid
          AND a.privilege_type OPERATOR(pg_catalog.=) 'INSERT'
          AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE INSERT ON %I.partner_api_audit_log FROM %s', schema_name, grantee);
        EXECUTE pg_catalog.format(
            'GRANT INSERT (organization_id, action, target, detail, actor, source_address, '
            'user_agent, request_id) ON %I.partner_api_audit_log TO %s', schema_name, grantee);
    END LOOP;
    EXECUTE pg_catalog.format($sql$
        UPDATE %1$I.partner_api_audit_log
        SET detail = pg_catalog.substring(detail, '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*')
        WHERE action OPERATOR(pg_catalog.=) 'webhook.added'
          AND detail OPERATOR(pg_catalog.~) '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*[/?#]'
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_audit_reserved_actors() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID OPERATOR(pg_catalog.<>) '%1$I.partner_api_audit_log'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            -- Compared as a reader sees them: case and spacing aside.
            IF pg_catalog.lower(pg_catalog.btrim(pg_catalog.regexp_replace(NEW.actor, '\s+', ' ', 'g')))
                   OPERATOR(pg_catalog.=) ANY (ARRAY['webhook delivery', 'github secret scanning'])
               AND NOT pg_catalog.pg_has_role(CURRENT_USER,
                   (SELECT c.relowner FROM pg_catalog.pg_class c
                    WHERE c.oid OPERATOR(pg_catalog.=) TG_RELID), 'MEMBER')
            THEN
                RAISE EXCEPTION 'partner_api: the actor %% is the crate''s own: only its triggers write it',
                    NEW.actor USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END
        $body$
    $sql$, schema_name);
    EXECUTE format($sql$
        CREATE TRIGGER partner_api_audit_log_reserved_actors
        BEFORE INSERT ON %1$I.partner_api_audit_log
        FOR EACH ROW EXECUTE FUNCTION %1$I.partner_api_audit_reserved_actors()
    $sql$, schema_name);

    -- The context of the report (its source address, user agent and request id) comes in the
    -- transaction-local settings partner_api.audit_source_address, _user_agent and
    -- _request_id, set by the statement's transaction: what the caller says, as every entry's.
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_audit_key_leaked() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID OPERATOR(pg_catalog.<>) '%1$I.partner_api_keys'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            INSERT INTO %1$I.partner_api_audit_log
                (organization_id, action, target, detail, actor, source_address, user_agent,
                 request_id)
            VALUES (NEW.organization_id, 'key.leaked', NEW.id::text,
                    pg_catalog.left(NEW.leak_url, 2000), 'github secret scanning',
                    pg_catalog.left(NULLIF(pg_catalog.current_setting('partner_api.audit_source_address', true), ''), 64),
                    pg_catalog.left(NULLIF(pg_catalog.current_setting('partner_api.audit_user_agent', true), ''), 200),
                    pg_catalog.left(NULLIF(pg_catalog.current_setting('partner_api.audit_request_id', true), ''), 200));
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
    -- Run by the trigger only, as the owner.
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_audit_key_leaked() FROM PUBLIC',
                   schema_name);
    EXECUTE format($sql$
        CREATE TRIGGER partner_api_keys_leaked_audited
        AFTER UPDATE OF leak_reported_at ON %1$I.partner_api_keys
        FOR EACH ROW WHEN (OLD.leak_reported_at IS NULL AND NEW.leak_reported_at IS NOT NULL)
        EXECUTE FUNCTION %1$I.partner_api_audit_key_leaked()
    $sql$, schema_name);

    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_enabled_by_admins() RETURNS trigger
        LANGUAGE plpgsql SET search_path = %1$I, pg_temp AS $body$
        BEGIN
            IF TG_RELID OPERATOR(pg_catalog.<>) '%1$I.partner_webhook_endpoints'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF NOT pg_catalog.has_table_privilege(CURRENT_USER, TG_RELID, 'INSERT') THEN
                RAISE EXCEPTION 'partner_api: only a role that may add webhook endpoints enables one'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END
        $body$
    $sql$, schema_name);
    EXECUTE format($sql$
        CREATE TRIGGER partner_webhook_endpoints_enabled_by_admins
        BEFORE UPDATE OF enabled ON %1$I.partner_webhook_endpoints
        FOR EACH ROW WHEN (NEW.enabled AND NOT OLD.enabled)
        EXECUTE FUNCTION %1$I.partner_api_enabled_by_admins()
    $sql$, schema_name);
END
$migration$;
