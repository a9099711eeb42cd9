-- A roll without overlap ends the old key by revoking it ('rolled'), no longer by an expiry at
-- the roll's instant: a revocation holds whatever the clocks say, while an expiry at "now" is
-- undone by a wall clock stepped back (a virtual machine resuming or syncing its time), which
-- made a rolled key valid again for as long as the step.
ALTER TABLE partner_api_keys
    DROP CONSTRAINT IF EXISTS partner_api_keys_revoked_reason_check,
    ADD CONSTRAINT partner_api_keys_revoked_reason_check
        CHECK (revoked_reason IN ('manual', 'leaked', 'rolled'));
