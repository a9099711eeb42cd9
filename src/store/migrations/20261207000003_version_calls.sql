-- Calls per API version (#57) are counted with the deprecated calls, one path: a target is a
-- route, a route's parameter, or an API version's name (`2026-11-28`).
ALTER TABLE partner_api_deprecated_calls
    DROP CONSTRAINT partner_api_deprecated_calls_target_check,
    ADD CONSTRAINT partner_api_deprecated_calls_target_check
        CHECK (target ~ '^/(me|orders|events)(\?[^&=#]{1,100})?$'
               OR target ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$');
