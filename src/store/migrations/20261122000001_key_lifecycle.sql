-- Keys as a Settings page manages them: a label, a hint and an environment for people, an
-- expiry enforced on every lookup, and the last use, written in batches.
ALTER TABLE partner_api_keys
    ADD COLUMN label        TEXT CHECK (char_length(label) <= 100),
    ADD COLUMN hint         TEXT,
    ADD COLUMN environment  TEXT CHECK (environment IN ('live', 'test')),
    ADD COLUMN expires_at   TIMESTAMPTZ,
    ADD COLUMN last_used_at TIMESTAMPTZ;

-- Lists an organization's keys newest first without a sort.
CREATE INDEX partner_api_keys_newest ON partner_api_keys (organization_id, created_at DESC, id DESC);
