-- Each webhook endpoint's API version (#57): what its orders' bodies are rendered at. NULL is
-- the first version (2026-11-27), the bodies as they were before versions: every endpoint
-- that exists when this runs keeps receiving exactly what it received.
ALTER TABLE partner_webhook_endpoints ADD COLUMN api_version DATE;
