-- The orders' change feed without NOTIFY: a transaction that calls NOTIFY takes a lock global
-- to the instance at commit, held across the commit's WAL flush, which halved the host's
-- concurrent order writes when measured with durable commits (benches/order_writes.sh). A row
-- in this log costs an insert instead; every replica's cache listener reads the log a few
-- times a second, by transaction id: after a read whose snapshot had `xmin` X, every
-- transaction below X has ended, so the next read asks only for rows of transactions from X
-- on, and none is missed however the transactions interleave.
CREATE UNLOGGED TABLE partner_api_order_changes (
    xid             xid8 NOT NULL DEFAULT pg_current_xact_id(),
    organization_id TEXT NOT NULL,
    logged_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX partner_api_order_changes_xid ON partner_api_order_changes (xid);

-- The organization whose pages changed (both, when an order moved). A host whose orders live
-- in its own tables gives them this trigger (docs::replicas).
CREATE FUNCTION partner_api_log_order_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO partner_api_order_changes (organization_id) VALUES (OLD.organization_id);
    END IF;
    IF TG_OP = 'INSERT'
       OR (TG_OP = 'UPDATE' AND NEW.organization_id IS DISTINCT FROM OLD.organization_id) THEN
        INSERT INTO partner_api_order_changes (organization_id) VALUES (NEW.organization_id);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER partner_orders_notify ON partner_orders;
CREATE TRIGGER partner_orders_log
    AFTER INSERT OR UPDATE OR DELETE ON partner_orders
    FOR EACH ROW EXECUTE FUNCTION partner_api_log_order_change();
