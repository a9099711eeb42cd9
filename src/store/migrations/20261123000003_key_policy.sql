-- Keys cannot outlive their policy: each key keeps the lifetime it was issued with, which a
-- roll passes on, and an organization may cap its keys' lifetime and its active keys.
ALTER TABLE partner_api_keys
    ADD COLUMN lifetime_ms BIGINT CHECK (lifetime_ms > 0);

-- Keys issued with an expiry before this migration: their lifetime as issued.
UPDATE partner_api_keys
   SET lifetime_ms = (extract(epoch FROM expires_at - created_at) * 1000)::bigint
 WHERE expires_at > created_at;

CREATE TABLE partner_api_key_policies (
    organization_id TEXT PRIMARY KEY REFERENCES partner_organizations (id) ON DELETE CASCADE,
    max_lifetime_ms BIGINT CHECK (max_lifetime_ms > 0),
    max_active_keys INTEGER NOT NULL CHECK (max_active_keys >= 0)
);
