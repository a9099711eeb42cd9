-- The audit log keeps milliseconds, the precision an entry is read with (AuditEntry::at, the
-- page token's position), as partner_orders.created_at does. With microseconds, a page that
-- ended on an entry of .123456 went on from .123000 and skipped an older entry of .123300
-- (a conformance run on a fast server did). Existing entries are rounded like new ones.
ALTER TABLE partner_api_audit_log ALTER COLUMN at TYPE TIMESTAMPTZ(3);
