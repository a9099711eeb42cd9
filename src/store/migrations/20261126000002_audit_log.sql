-- The audit log of organizations: every change made through the crate, written in the
-- transaction of the change. Append-only for the documented roles (they are granted INSERT
-- and SELECT, never UPDATE or DELETE); retention, by the owner's role, is the only deletion.
CREATE TABLE partner_api_audit_log (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    organization_id TEXT NOT NULL REFERENCES partner_organizations (id),
    action          TEXT NOT NULL CHECK (action ~ '^[a-z0-9_]+(\.[a-z0-9_]+)+$'
                                         AND length(action) <= 100),
    target          TEXT CHECK (length(target) <= 200),
    detail          TEXT CHECK (length(detail) <= 2200),
    actor           TEXT NOT NULL CHECK (length(actor) <= 200),
    source_address  TEXT CHECK (length(source_address) <= 64),
    user_agent      TEXT CHECK (length(user_agent) <= 200),
    request_id      TEXT CHECK (length(request_id) <= 200)
);

-- An organization's entries newest first, one index range scan a page; retention by age.
CREATE INDEX partner_api_audit_log_organization
    ON partner_api_audit_log (organization_id, at DESC, id DESC);
CREATE INDEX partner_api_audit_log_at ON partner_api_audit_log (at);
