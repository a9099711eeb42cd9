-- Each key's calls of deprecated routes and parameters per UTC day, written by the replicas'
-- deprecated-call recorders as upserts that add, read by the management service and by the
-- partner's GET /deprecations, pruned by age. A target is a route (`/orders`) or a route's
-- query parameter (`/orders?provider`).
CREATE TABLE partner_api_deprecated_calls (
    key_id       BIGINT NOT NULL REFERENCES partner_api_keys (id),
    day          TIMESTAMPTZ NOT NULL
                 -- A whole UTC day, whatever the session's time zone, in the years a reader holds.
                 CHECK (extract(epoch FROM day) = floor(extract(epoch FROM day) / 86400) * 86400
                        AND day >= '0001-01-01 00:00:00+00' AND day < '10000-01-01 00:00:00+00'),
    target       TEXT NOT NULL CHECK (target ~ '^/(me|orders|events)(\?[^&=#]{1,100})?$'),
    calls        BIGINT NOT NULL CHECK (calls > 0),
    last_call_at TIMESTAMPTZ NOT NULL
                 CHECK (last_call_at >= '0001-01-01 00:00:00+00'
                        AND last_call_at < '10000-01-01 00:00:00+00'),
    PRIMARY KEY (key_id, target, day)
);

-- Retention deletes the oldest days first, in small batches.
CREATE INDEX partner_api_deprecated_calls_day ON partner_api_deprecated_calls (day);

-- GET /deprecations is a keyed route like the others: counted in the key's usage.
ALTER TABLE partner_api_key_usage DROP CONSTRAINT partner_api_key_usage_route_check;
ALTER TABLE partner_api_key_usage
    ADD CONSTRAINT partner_api_key_usage_route_check
    CHECK (route IN ('/me', '/orders', '/events', '/deprecations'));
