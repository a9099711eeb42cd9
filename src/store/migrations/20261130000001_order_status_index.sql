-- GET /orders?status= (#45): one index range scan per status asked for, newest first, merged
-- by the query; a filtered page deep in an organization's orders costs what the first does.
-- The creation range and the position use partner_orders_newest, as the unfiltered pages do.
-- Built inside the migration's transaction, it holds order writes while it builds: on a large
-- table, create it beforehand with CREATE INDEX CONCURRENTLY (same name and definition), and
-- the migration finds it.
CREATE INDEX IF NOT EXISTS partner_orders_status
    ON partner_orders (organization_id, status, created_at DESC, id DESC);
