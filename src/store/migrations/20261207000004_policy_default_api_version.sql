-- An organization's default API version (#57): what its new keys and webhook endpoints are
-- pinned to when the admin names none. NULL: the API's newest.
ALTER TABLE partner_api_key_policies ADD COLUMN default_api_version DATE;
