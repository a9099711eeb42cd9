-- Each key's answered requests per hour (UTC), route and outcome, written by the replicas'
-- usage recorders as upserts that add, read by the management service, pruned by age.
CREATE TABLE partner_api_key_usage (
    key_id   BIGINT NOT NULL REFERENCES partner_api_keys (id),
    hour     TIMESTAMPTZ NOT NULL
             -- A whole UTC hour, whatever the session's time zone.
             CHECK (extract(epoch FROM hour) = floor(extract(epoch FROM hour) / 3600) * 3600),
    route    TEXT NOT NULL CHECK (route IN ('/me', '/orders')),
    outcome  TEXT NOT NULL CHECK (outcome IN ('ok', 'not_modified', 'revoked', 'expired',
                                              'address_not_allowed', 'rate_limited', 'error')),
    requests BIGINT NOT NULL CHECK (requests > 0),
    PRIMARY KEY (key_id, hour, route, outcome)
);

-- Retention deletes the oldest hours first, in small batches.
CREATE INDEX partner_api_key_usage_hour ON partner_api_key_usage (hour);
