-- Retention deletes the oldest messages first (with their deliveries and attempts, by the
-- foreign keys' cascade): an index on when they were raised keeps each batch a short range
-- scan however large the table.
CREATE INDEX partner_webhook_messages_raised ON partner_webhook_messages (raised_at);
