-- Every timestamp column of the crate's tables holds an instant the crate can read and serve:
-- finite, in the years 1 to 9999. PostgreSQL accepts 'infinity' and years to 294276, which
-- chrono cannot hold; a row that a documented role wrote with one failed every read of it.
-- The reads now turn such a value into an error of the one call (src/store/postgres/
-- timestamp.rs); these checks refuse it at the write, so it names the writer instead.
--
-- NOT VALID: a row written before this migration is not scanned for (no long lock on a large
-- table, no failed upgrade over an old bad row); it stays an error of the reads that meet it
-- until it is repaired, when `ALTER TABLE ... VALIDATE CONSTRAINT` can confirm the table.
-- A NULL passes: the columns that may be empty stay so.
ALTER TABLE partner_api_keys
    ADD CONSTRAINT partner_api_keys_timestamps_in_range CHECK (
        (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00')
        AND (revoked_at >= '0001-01-01 00:00:00+00' AND revoked_at < '10000-01-01 00:00:00+00')
        AND (expires_at >= '0001-01-01 00:00:00+00' AND expires_at < '10000-01-01 00:00:00+00')
        AND (last_used_at >= '0001-01-01 00:00:00+00' AND last_used_at < '10000-01-01 00:00:00+00')
        AND (leak_reported_at >= '0001-01-01 00:00:00+00' AND leak_reported_at < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_orders
    ADD CONSTRAINT partner_orders_created_at_in_range
        CHECK ((created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_webhook_endpoints
    ADD CONSTRAINT partner_webhook_endpoints_timestamps_in_range CHECK (
        (previous_secret_until >= '0001-01-01 00:00:00+00' AND previous_secret_until < '10000-01-01 00:00:00+00')
        AND (failing_since >= '0001-01-01 00:00:00+00' AND failing_since < '10000-01-01 00:00:00+00')
        AND (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_webhook_messages
    ADD CONSTRAINT partner_webhook_messages_raised_at_in_range
        CHECK ((raised_at >= '0001-01-01 00:00:00+00' AND raised_at < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_webhook_deliveries
    ADD CONSTRAINT partner_webhook_deliveries_due_at_in_range
        CHECK ((due_at >= '0001-01-01 00:00:00+00' AND due_at < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_webhook_attempts
    ADD CONSTRAINT partner_webhook_attempts_attempted_at_in_range
        CHECK ((attempted_at >= '0001-01-01 00:00:00+00' AND attempted_at < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_api_key_usage
    ADD CONSTRAINT partner_api_key_usage_hour_in_range
        CHECK ((hour >= '0001-01-01 00:00:00+00' AND hour < '10000-01-01 00:00:00+00')) NOT VALID;
ALTER TABLE partner_api_audit_log
    ADD CONSTRAINT partner_api_audit_log_at_in_range
        CHECK ((at >= '0001-01-01 00:00:00+00' AND at < '10000-01-01 00:00:00+00')) NOT VALID;
-- The orders' dates, served as `YYYY-MM-DD`: an open-ended campaign's 'infinity' too.
ALTER TABLE partner_orders
    ADD CONSTRAINT partner_orders_dates_in_range CHECK (
        start_date >= '0001-01-01' AND start_date <= '9999-12-31'
        AND end_date >= '0001-01-01' AND end_date <= '9999-12-31') NOT VALID;
