-- GET /orders?provider= (#45): the orders that hold a provider, found through the array's own
-- index when the provider is rare (a bitmap of its orders, sorted newest first); a common one
-- fills a page from partner_orders_newest as fast. The planner chooses by the column's
-- statistics of its elements. On a large table, create it beforehand CONCURRENTLY, as the
-- status index.
CREATE INDEX IF NOT EXISTS partner_orders_providers ON partner_orders USING gin (providers);
