-- The reference schema of partner-api's PgStore.

CREATE TABLE partner_organizations (
    id   TEXT PRIMARY KEY,
    name TEXT NOT NULL
);

-- API keys are kept only as SHA-256 digests; revocation sets revoked_at.
CREATE TABLE partner_api_keys (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES partner_organizations (id),
    key_sha256      BYTEA NOT NULL CHECK (octet_length(key_sha256) = 32),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at      TIMESTAMPTZ
);
CREATE UNIQUE INDEX partner_api_keys_key_sha256 ON partner_api_keys (key_sha256);

-- Order ids compare in byte order (COLLATE "C"), the tie-break of the API's newest-first order,
-- and created_at keeps milliseconds, the precision the API serves.
CREATE TABLE partner_orders (
    organization_id    TEXT NOT NULL REFERENCES partner_organizations (id),
    id                 TEXT COLLATE "C" NOT NULL,
    providers          TEXT[] NOT NULL,
    advertiser_name    TEXT NOT NULL,
    campaign_name      TEXT NOT NULL,
    budget_dkk         BIGINT NOT NULL CHECK (budget_dkk >= 0),
    start_date         DATE NOT NULL,
    end_date           DATE NOT NULL,
    status             TEXT NOT NULL,
    external_reference TEXT NOT NULL,
    created_at         TIMESTAMPTZ(3) NOT NULL,
    PRIMARY KEY (organization_id, id)
);
-- Serves "the newest 100 orders of one organization" as one index range scan, no sort.
CREATE INDEX partner_orders_newest ON partner_orders (organization_id, created_at DESC, id DESC);
