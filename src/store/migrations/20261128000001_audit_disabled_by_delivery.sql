-- An endpoint that delivery disables (it answered 410 Gone, or failed for the disable period)
-- gets its audit entry, `webhook.disabled` by `webhook delivery` with the reason (`gone` or
-- `failing`) as its detail, in the transaction that disables it. A trigger writes it, as the
-- owner: the delivering role gets no right on the audit log, so the most it can make the log
-- say is that delivery disabled an endpoint, and only by disabling it, which it may do anyway.
-- The delivery's statement names the reason in the transaction-local setting
-- partner_api.disable_reason; a disabling without it (an admin's, who writes an entry of its
-- own) writes nothing here.
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
            IF reason OPERATOR(pg_catalog.=) ANY (ARRAY['gone', 'failing']) THEN
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
