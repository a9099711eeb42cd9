-- The most webhook endpoints an organization may have: part of its policy (default 20), so one
-- organization cannot hold the delivery workers with hundreds of endpoints.
ALTER TABLE partner_api_key_policies
    ADD COLUMN max_webhook_endpoints INTEGER NOT NULL DEFAULT 20
        CHECK (max_webhook_endpoints >= 0);
