-- Keys pinned to address ranges, and why a key was revoked: by hand, or because a secret
-- scanner found it in public (and where).
ALTER TABLE partner_api_keys
    ADD COLUMN allowed_ips      CIDR[] NOT NULL DEFAULT '{}'
        CHECK (cardinality(allowed_ips) <= 100),
    ADD COLUMN revoked_reason   TEXT CHECK (revoked_reason IN ('manual', 'leaked')),
    ADD COLUMN leak_url         TEXT,
    ADD COLUMN leak_source      TEXT,
    ADD COLUMN leak_reported_at TIMESTAMPTZ;

-- A key's allowed ranges are part of what a lookup answers: a change of them is sent to the
-- caches of every replica, like a revocation.
CREATE OR REPLACE FUNCTION partner_api_notify_updated_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM partner_api_notify_key_ids(ARRAY(
        SELECT DISTINCT id::text FROM (
            (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
               FROM old_keys
             EXCEPT
             SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
               FROM new_keys)
            UNION ALL
            (SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
               FROM new_keys
             EXCEPT
             SELECT id, organization_id, key_sha256, revoked_at, expires_at, allowed_ips
               FROM old_keys)
        ) changed));
    RETURN NULL;
END
$$;
