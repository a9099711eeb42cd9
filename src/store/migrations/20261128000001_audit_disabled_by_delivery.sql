-- An endpoint that delivery disables (it answered 410 Gone, or failed for the disable period)
-- gets its audit entry, `webhook.disabled` by `webhook delivery` with the reason (`gone` or
-- `failing`) as its detail, in the transaction that disables it. A trigger writes it, as the
-- owner: the delivering role gets no right on the audit log, so the most it can make the log
-- say is that delivery disabled an endpoint, and only by disabling it, which it may do anyway.
-- The delivery's statement (its own transaction) names the reason in the transaction-local
-- setting partner_api.disable_reason; a disabling without it (an admin's, who writes an entry
-- of its own) writes nothing here. At most one such entry follows each enabling on record
-- (`webhook.enabled`, or the endpoint's `webhook.added`): the delivering role may also set
-- `enabled` back to true, unlogged, and must not fill the log by disabling again and again.
DO $migration$
DECLARE
    schema_name text := current_schema();
BEGIN
    EXECUTE format($sql$
        CREATE FUNCTION %1$I.partner_api_audit_disabled_by_delivery() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $body$
        DECLARE
            reason text := pg_catalog.current_setting('partner_api.disable_reason', true);
        BEGIN
            IF TG_RELID OPERATOR(pg_catalog.<>) '%1$I.partner_webhook_endpoints'::regclass::oid THEN
                PERFORM %1$I.partner_api_refuse_table(TG_NAME, TG_RELID);
            END IF;
            IF reason IS NULL OR NOT reason OPERATOR(pg_catalog.=) ANY (ARRAY['gone', 'failing']) THEN
                RETURN NULL;
            END IF;
            IF NOT EXISTS (
                SELECT 1 FROM %1$I.partner_api_audit_log a
                WHERE a.organization_id OPERATOR(pg_catalog.=) NEW.organization_id
                  AND a.target OPERATOR(pg_catalog.=) NEW.id::text
                  AND a.action OPERATOR(pg_catalog.=) 'webhook.disabled'
                  AND a.actor OPERATOR(pg_catalog.=) 'webhook delivery'
                  AND a.id OPERATOR(pg_catalog.>) (
                      -- COALESCE is syntax, not a function: nothing to qualify.
                      SELECT COALESCE(pg_catalog.max(b.id), 0)
                      FROM %1$I.partner_api_audit_log b
                      WHERE b.organization_id OPERATOR(pg_catalog.=) NEW.organization_id
                        AND b.target OPERATOR(pg_catalog.=) NEW.id::text
                        AND b.action OPERATOR(pg_catalog.=) 'webhook.enabled'))
            THEN
                INSERT INTO %1$I.partner_api_audit_log
                    (organization_id, action, target, detail, actor)
                VALUES (NEW.organization_id, 'webhook.disabled', NEW.id::text, reason,
                        'webhook delivery');
            END IF;
            RETURN NULL;
        END
        $body$
    $sql$, schema_name);
    -- Run by the trigger only, as the owner.
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %1$I.partner_api_audit_disabled_by_delivery() FROM PUBLIC',
                   schema_name);
    EXECUTE format($sql$
        CREATE TRIGGER partner_webhook_endpoints_disabled_by_delivery
        AFTER UPDATE OF enabled ON %1$I.partner_webhook_endpoints
        FOR EACH ROW WHEN (OLD.enabled AND NOT NEW.enabled)
        EXECUTE FUNCTION %1$I.partner_api_audit_disabled_by_delivery()
    $sql$, schema_name);
END
$migration$;
