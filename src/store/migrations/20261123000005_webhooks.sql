-- Webhooks: endpoints per organization, and a transactional outbox of their deliveries,
-- written by a trigger on the orders in the transaction of the change (nothing is sent for a
-- rolled-back change, nothing committed is lost).

CREATE TABLE partner_webhook_endpoints (
    id                    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id       TEXT NOT NULL REFERENCES partner_organizations (id),
    url                   TEXT NOT NULL,
    -- Empty: every event type.
    events                TEXT[] NOT NULL DEFAULT '{}',
    description           TEXT NOT NULL DEFAULT '',
    enabled               BOOLEAN NOT NULL DEFAULT true,
    -- HMAC keys must be readable to sign with; the table is as sensitive as the key store.
    secret                TEXT NOT NULL,
    previous_secret       TEXT,
    previous_secret_until TIMESTAMPTZ,
    -- Set by the first failed attempt after a success, cleared by the next success.
    failing_since         TIMESTAMPTZ,
    created_at            TIMESTAMPTZ(3) NOT NULL DEFAULT now()
);
-- The one look-up an order write pays when its organization has no enabled endpoint.
CREATE INDEX partner_webhook_endpoints_enabled
    ON partner_webhook_endpoints (organization_id) WHERE enabled;
CREATE INDEX partner_webhook_endpoints_organization
    ON partner_webhook_endpoints (organization_id, id);

-- One event, whoever hears it: the order as it was written (a snapshot, so that every
-- delivery of it carries the same bytes), or for a deletion only its id.
CREATE TABLE partner_webhook_messages (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    order_id        TEXT COLLATE "C",
    order_row       JSONB,
    -- The `data` of an event that is not an order's (webhook.test).
    data            JSONB,
    raised_at       TIMESTAMPTZ(3) NOT NULL DEFAULT clock_timestamp()
);

-- One message to one endpoint. A claim increments `attempts` and moves `due_at` to the end
-- of its lease in one committed statement; a finish counts only at the same `attempts`.
CREATE TABLE partner_webhook_deliveries (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id  BIGINT NOT NULL REFERENCES partner_webhook_messages (id) ON DELETE CASCADE,
    endpoint_id BIGINT NOT NULL REFERENCES partner_webhook_endpoints (id) ON DELETE CASCADE,
    webhook_id  TEXT NOT NULL DEFAULT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
    order_id    TEXT COLLATE "C",
    state       TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'succeeded', 'failed')),
    due_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts    INTEGER NOT NULL DEFAULT 0,
    -- `attempts` when the current round of tries began (a retry or recovery on request).
    round_start INTEGER NOT NULL DEFAULT 0
);
-- A claim's order (per endpoint: first attempts before retries, then by due time) as an index
-- range, so a claim reads the few rows it takes, not the whole backlog.
CREATE INDEX partner_webhook_deliveries_due
    ON partner_webhook_deliveries (endpoint_id, (attempts > round_start), due_at, id)
    WHERE state = 'pending';
-- "Is an earlier change of this order still pending to this endpoint?"
CREATE INDEX partner_webhook_deliveries_order
    ON partner_webhook_deliveries (endpoint_id, order_id, id) WHERE state = 'pending';
CREATE INDEX partner_webhook_deliveries_message
    ON partner_webhook_deliveries (endpoint_id, webhook_id);
CREATE INDEX partner_webhook_deliveries_of_message
    ON partner_webhook_deliveries (message_id);

CREATE TABLE partner_webhook_attempts (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id     BIGINT NOT NULL REFERENCES partner_webhook_deliveries (id) ON DELETE CASCADE,
    endpoint_id     BIGINT NOT NULL,
    attempt         INTEGER NOT NULL,
    outcome         TEXT NOT NULL,
    response_status INTEGER,
    error           TEXT,
    response_body   TEXT,
    duration_ms     BIGINT NOT NULL,
    attempted_at    TIMESTAMPTZ(3) NOT NULL
);
CREATE INDEX partner_webhook_attempts_endpoint ON partner_webhook_attempts (endpoint_id, id);
CREATE INDEX partner_webhook_attempts_delivery ON partner_webhook_attempts (delivery_id);

-- Queues one event for the organization's enabled endpoints subscribed to its type.
CREATE FUNCTION partner_api_raise_order_event(org text, kind text, order_key text, snapshot jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    message bigint;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM partner_webhook_endpoints
        WHERE organization_id = org AND enabled AND (cardinality(events) = 0 OR kind = ANY (events))
    ) THEN
        RETURN;
    END IF;
    INSERT INTO partner_webhook_messages (organization_id, event_type, order_id, order_row)
        VALUES (org, kind, order_key, snapshot)
        RETURNING id INTO message;
    INSERT INTO partner_webhook_deliveries (message_id, endpoint_id, order_id)
        SELECT message, e.id, order_key FROM partner_webhook_endpoints e
        WHERE e.organization_id = org AND e.enabled
          AND (cardinality(e.events) = 0 OR kind = ANY (e.events));
END
$$;

-- The orders' webhook events, beside the caches' change log (its own trigger, so a host table
-- that has the log's trigger but not the order's columns keeps working). A host whose orders
-- live in its own tables gives them this trigger too (docs::webhooks): the snapshot is
-- `to_jsonb(NEW)`, so such a table needs the columns of partner_orders.
--
-- Without an enabled endpoint in the order's organization it costs one indexed look-up of
-- partner_webhook_endpoints_enabled and builds no snapshot. SECURITY DEFINER: the role that
-- writes orders needs no right on the webhook tables (which hold the endpoints' secrets); the
-- search path is the migration's. (In an INSERT trigger OLD is null, in a DELETE one NEW.)
CREATE FUNCTION partner_api_raise_order_events() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM partner_webhook_endpoints
        WHERE enabled AND organization_id IN (OLD.organization_id, NEW.organization_id)
    ) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM partner_api_raise_order_event(NEW.organization_id, 'order.created', NEW.id::text, to_jsonb(NEW));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM partner_api_raise_order_event(OLD.organization_id, 'order.deleted', OLD.id::text, NULL);
    ELSIF NEW.organization_id IS DISTINCT FROM OLD.organization_id OR NEW.id IS DISTINCT FROM OLD.id THEN
        -- Moved: gone from where it was, new where it is.
        PERFORM partner_api_raise_order_event(OLD.organization_id, 'order.deleted', OLD.id::text, NULL);
        PERFORM partner_api_raise_order_event(NEW.organization_id, 'order.created', NEW.id::text, to_jsonb(NEW));
    ELSIF NEW IS DISTINCT FROM OLD THEN
        PERFORM partner_api_raise_order_event(NEW.organization_id, 'order.updated', NEW.id::text, to_jsonb(NEW));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER partner_orders_webhooks
    AFTER INSERT OR UPDATE OR DELETE ON partner_orders
    FOR EACH ROW EXECUTE FUNCTION partner_api_raise_order_events();
