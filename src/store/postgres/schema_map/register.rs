//! The crate's triggers made for a [`SchemaMap`](super::SchemaMap): on the host's orders
//! table, one that writes each change's event (which the caches read too) and its
//! webhooks, from the order as the map shows it; on the host's organizations table, one that
//! tells the caches when an organization is renamed or deleted. Made by the owner
//! ([`PgStore::register_schema_map`](crate::PgStore::register_schema_map)).

use sha2::{Digest, Sha256};

use super::{OrderField, OrdersMap, OrganizationsMap, Table, EXPRESSION_SEARCH_PATH};

/// A name for what the crate makes for `table`: `partner_api_{what}_{table}`, in letters,
/// digits and underscores, within PostgreSQL's 63 bytes.
pub(in crate::store::postgres) fn name_for(what: &str, table: &Table) -> String {
    format!(
        "partner_api_{what}_{}",
        bare_identifier(&table.bare_name, 40)
    )
}

/// `text` in lower-case letters, digits and underscores (anything else an underscore), at
/// most `max` of them: a part of a name the crate makes.
pub(in crate::store::postgres) fn bare_identifier(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}

/// The name of a trigger function made for `table`: [`name_for`] with a digest of the table's
/// qualified name, so tables of one name in two schemas never share (nor replace) one.
pub(in crate::store::postgres) fn function_for(what: &str, table: &Table) -> String {
    let digest = Sha256::digest(table.name.as_bytes());
    let tag: String = digest[..4]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("{}_{tag}", name_for(what, table))
}

/// A fingerprint of the statements that make a table's trigger: written as the function's
/// comment, so a registration that would change nothing changes nothing (no lock of the
/// host's table at each start).
pub(in crate::store::postgres) fn fingerprint(statements: &[String]) -> String {
    let mut digest = Sha256::new();
    for statement in statements {
        digest.update(statement.as_bytes());
        digest.update([0]);
    }
    let hex: String = digest.finalize()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("partner_api schema map {hex}")
}

/// The contract's checks, as the trigger of the crate's own table makes them (#54), over the
/// mapped order `t`: a snapshot only for an order every reader can show, its times in UTC
/// whatever the writer's session says; NULL otherwise. The snapshot is a row of the crate's
/// type `partner_api_order_snapshot` (in `schema`, quoted) turned to JSON whole: the same JSON
/// as `jsonb_build_object` over its fields, with a catalog look-up per field instead of one
/// per key and one per value (migration `20261211000002_order_snapshot_row`).
pub(in crate::store::postgres) fn shown(schema: &str) -> String {
    format!(
        "CASE WHEN {} \
        THEN pg_catalog.to_jsonb(ROW( \
            t.id, t.providers, t.advertiser_name, t.campaign_name, t.budget_dkk, \
            pg_catalog.to_char(t.start_date, 'YYYY-MM-DD'), \
            pg_catalog.to_char(t.end_date, 'YYYY-MM-DD'), \
            t.status, t.external_reference, \
            pg_catalog.to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
        )::{schema}.partner_api_order_snapshot) \
        END",
        contract_checks(|field| format!("t.{field}"))
    )
}

/// An order's fields of text (its id, providers and words), as [`contract_checks`] and
/// [`unrenderable`] name them.
const TEXT_FIELDS: [&str; 6] = [
    "id",
    "providers",
    "advertiser_name",
    "campaign_name",
    "status",
    "external_reference",
];

/// The contract's checks of an order whose fields `field` names (`id`, `providers`, ...):
/// true for an order every reader can show ([`shown`], and the providers before an update).
fn contract_checks(field: impl Fn(&str) -> String) -> String {
    let [id, providers, advertiser_name, campaign_name, status, external_reference] =
        TEXT_FIELDS.map(&field);
    let [budget_dkk, start_date, end_date, created_at] =
        ["budget_dkk", "start_date", "end_date", "created_at"].map(&field);
    format!(
        "{id} IS NOT NULL AND {providers} IS NOT NULL \
            AND pg_catalog.array_position({providers}, NULL) IS NULL \
            AND {advertiser_name} IS NOT NULL AND {campaign_name} IS NOT NULL \
            AND {status} IS NOT NULL AND {external_reference} IS NOT NULL \
            AND {budget_dkk} OPERATOR(pg_catalog.>=) 0::bigint \
            AND {budget_dkk} OPERATOR(pg_catalog.<=) 9007199254740991::bigint \
            AND {start_date} OPERATOR(pg_catalog.>=) '0001-01-01'::date \
            AND {start_date} OPERATOR(pg_catalog.<) '10000-01-01'::date \
            AND {end_date} OPERATOR(pg_catalog.>=) '0001-01-01'::date \
            AND {end_date} OPERATOR(pg_catalog.<) '10000-01-01'::date \
            AND {created_at} OPERATOR(pg_catalog.>=) '0001-01-01 00:00:00+00'::timestamptz \
            AND {created_at} OPERATOR(pg_catalog.<) '10000-01-01 00:00:00+00'::timestamptz"
    )
}

/// The crate's schema (`current_schema()`, quoted), once its migrations have made the type
/// [`shown`] casts to and the events' columns of an order as written (which a mapped
/// table's trigger inserts into, outside any exception block); refused, naming `migrate`,
/// where they have not (a registration or a capture reader ahead of its database): every
/// snapshot would otherwise fail, and be taken for an order the map cannot show, silently,
/// and every insert into a mapped table would fail. One query for all.
pub(in crate::store::postgres) async fn migrated_schema(
    connection: &mut sqlx::PgConnection,
) -> Result<String, crate::store::StoreError> {
    let (schema, present): (String, bool) = sqlx::query_as(
        "SELECT pg_catalog.quote_ident(current_schema()), \
                pg_catalog.to_regtype(pg_catalog.format('%I.partner_api_order_snapshot', \
                                                        current_schema())) IS NOT NULL \
                AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a \
                            WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass( \
                                      pg_catalog.format('%I.partner_api_order_events', \
                                                        current_schema())) \
                              AND a.attname OPERATOR(pg_catalog.=) 'new_created_at' \
                              AND NOT a.attisdropped)",
    )
    .fetch_one(connection)
    .await
    .map_err(crate::store::postgres::store_error)?;
    if present {
        Ok(schema)
    } else {
        Err(crate::store::StoreError::other(format!(
            "the type {schema}.partner_api_order_snapshot or the column \
             partner_api_order_events.new_created_at is missing: this database's migrations \
             are older than this code; run `migrate` (as the schema's owner) first"
        )))
    }
}

/// The statements that make the orders' trigger for `table` read through `orders`, in the
/// crate's schema `schema` (quoted).
pub(in crate::store::postgres) fn orders_trigger(
    schema: &str,
    table: &Table,
    orders: &OrdersMap,
) -> Vec<String> {
    let function = format!("{schema}.{}", function_for("orders", table));
    let relation = &table.name;
    let oid = table.oid;
    let list = orders.select_list();
    let keys = format!(
        "{}, {}",
        orders.item(OrderField::Organization),
        orders.item(OrderField::Id)
    );
    let shown = shown(schema);
    let old_order = read_through_map("OLD", &list, &keys, &shown);
    let new_order = read_through_map("NEW", &list, &keys, &shown);
    // The mapped order of the row `row` (`NEW`, `OLD`) read into the trigger's variables
    // that start with `into` (`written_`, `before_`): its organization, its id, its fields.
    let read_into = |row: &str, into: &str| {
        format!(
            "SELECT t.organization_id, t.id, {}\n                INTO {into}org, {into}id, {}\n                FROM (SELECT {list} FROM (SELECT {row}.*) AS r) AS t;",
            prefixed_fields("t."),
            prefixed_fields(into),
        )
    };
    let (read_new, read_old) = (read_into("NEW", "written_"), read_into("OLD", "before_"));
    let (columns, written) = (prefixed_fields("new_"), prefixed_fields("written_"));
    let unchanged = ORDER_FIELDS
        .map(|field| format!("written_{field} IS NOT DISTINCT FROM before_{field}"))
        .join(" AND ");
    let shown_before = format!(
        "CASE WHEN {} THEN '[]'::jsonb WHEN {} THEN pg_catalog.to_jsonb(before_providers) \
         ELSE '[]'::jsonb END",
        unrenderable(|field| format!("before_{field}")),
        contract_checks(|field| format!("before_{field}"))
    );
    let body = format!(
        r#"
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {EXPRESSION_SEARCH_PATH} AS $partner_api$
#variable_conflict use_column
DECLARE
    old_org text;
    old_id text;
    old_row jsonb;
    new_org text;
    new_id text;
    new_row jsonb;
    new_shown jsonb;
    old_shown jsonb;
    before jsonb;
    orgs text[];
    kinds text[];
    order_keys text[];
    i integer;
    written_org text;
    written_id text;
    written_providers text[];
    written_advertiser_name text;
    written_campaign_name text;
    written_budget_dkk bigint;
    written_start_date date;
    written_end_date date;
    written_status text;
    written_external_reference text;
    written_created_at timestamptz;
    before_org text;
    before_id text;
    before_providers text[];
    before_advertiser_name text;
    before_campaign_name text;
    before_budget_dkk bigint;
    before_start_date date;
    before_end_date date;
    before_status text;
    before_external_reference text;
    before_created_at timestamptz;
BEGIN
    -- An insert into the table this function was made for, the writes' common case: the
    -- order's fields as the map converts them, which the stamping renders (migration
    -- `20261212000001_render_at_stamping`), read in an exception block (a conversion may
    -- fail per row) and inserted after it: a block that only reads takes no transaction id
    -- of its own, where one that inserted would take one per order written (and a host's
    -- batch of more than 64 would overflow its backend's cache of them). A row the map
    -- cannot convert, or without its organization or id, takes the general way below.
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' AND TG_RELID OPERATOR(pg_catalog.=) {oid}::oid THEN
        BEGIN
            {read_new}
        EXCEPTION WHEN OTHERS THEN
            written_org := NULL;
        END;
        IF written_org IS NOT NULL AND written_id IS NOT NULL THEN
            INSERT INTO {schema}.partner_api_order_events
                    (organization_id, change, order_id, {columns})
                VALUES (written_org, 'order.created', written_id, {written});
            RETURN NULL;
        END IF;
    END IF;
    -- An update of that table which leaves the order where it is, the next most common:
    -- the order before and after read through the map into typed variables (in a block that
    -- only reads, as above). Nothing the contract shows changed (a column the map does not
    -- read, say): no event. Otherwise its event with the order's fields, and the providers
    -- the feed showed before: the order before's, when the stamping could show it (what
    -- would make its render fail first, then the contract's checks). A row the map cannot
    -- convert, or an order that moved, takes the general way below.
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND TG_RELID OPERATOR(pg_catalog.=) {oid}::oid THEN
        BEGIN
            {read_new}
            {read_old}
        EXCEPTION WHEN OTHERS THEN
            written_org := NULL;
        END;
        IF written_org IS NOT NULL AND written_id IS NOT NULL
           AND written_org IS NOT DISTINCT FROM before_org
           AND written_id IS NOT DISTINCT FROM before_id THEN
            IF {unchanged} THEN
                RETURN NULL;
            END IF;
            INSERT INTO {schema}.partner_api_order_events
                    (organization_id, change, order_id, previous_providers, {columns})
                VALUES (written_org, 'order.updated', written_id, {shown_before},
                        {written});
            RETURN NULL;
        END IF;
    END IF;
    -- Only for a table registered (by the owner, who alone may attach this function): a
    -- table renamed stays registered, its oid is. The table this function was made for
    -- (registered in the same statements) passes without a look-up, a query the change would
    -- otherwise run every time; any other (a restored copy has a new oid) is looked up.
    IF TG_RELID OPERATOR(pg_catalog.<>) {oid}::oid THEN
        IF NOT EXISTS (SELECT 1 FROM {schema}.partner_api_order_tables t
                       WHERE t.relid::oid OPERATOR(pg_catalog.=) TG_RELID) THEN
            PERFORM {schema}.partner_api_refuse_table(TG_NAME, TG_RELID);
        END IF;
    END IF;
    -- The order before and after, as the map shows it; a row the map cannot show whole
    -- still has its organization and id when those convert (its event is then unshowable).
    IF TG_OP <> 'INSERT' THEN
{old_order}
    END IF;
    IF TG_OP <> 'DELETE' THEN
{new_order}
    END IF;
    -- The providers the feed showed before the change: the old order's, when it was shown
    -- (`[]` when it was not: no view saw it).
    before := COALESCE(old_shown -> 'providers', '[]'::jsonb);
    IF TG_OP = 'INSERT' THEN
        orgs := ARRAY[new_org];
        kinds := ARRAY['order.created'];
        order_keys := ARRAY[new_id];
    ELSIF TG_OP = 'DELETE' THEN
        orgs := ARRAY[old_org];
        kinds := ARRAY['order.deleted'];
        order_keys := ARRAY[old_id];
    ELSIF new_org IS DISTINCT FROM old_org OR new_id IS DISTINCT FROM old_id THEN
        -- Moved: gone from where it was, new where it is.
        orgs := ARRAY[old_org, new_org];
        kinds := ARRAY['order.deleted', 'order.created'];
        order_keys := ARRAY[old_id, new_id];
    ELSIF old_row IS NOT NULL AND new_row IS NOT NULL
          AND old_row OPERATOR(pg_catalog.=) new_row THEN
        -- Nothing the contract shows changed (a column the map does not read, say).
        RETURN NULL;
    ELSE
        orgs := ARRAY[new_org];
        kinds := ARRAY['order.updated'];
        order_keys := ARRAY[new_id];
    END IF;
    FOR i IN 1 .. pg_catalog.cardinality(kinds) LOOP
        IF orgs[i] IS NULL OR order_keys[i] IS NULL THEN
            RAISE WARNING 'partner_api: a row of % has no organization or id through the schema map; its change is in no feed', TG_RELID::regclass;
            CONTINUE;
        END IF;
        -- The change's one record: the caches read it, and its webhooks are written from it
        -- when it is stamped.
        INSERT INTO {schema}.partner_api_order_events
                (organization_id, change, order_id, order_row, previous_providers)
            VALUES (orgs[i], kinds[i], order_keys[i],
                    CASE WHEN kinds[i] = 'order.deleted' THEN NULL ELSE new_shown END,
                    CASE WHEN kinds[i] = 'order.created' THEN NULL ELSE before END);
    END LOOP;
    RETURN NULL;
END
$partner_api$"#
    );
    vec![
        format!(
            "INSERT INTO {schema}.partner_api_order_tables (relid) \
             VALUES ({oid}::oid::regclass) ON CONFLICT (relid) DO NOTHING"
        ),
        drop_crate_triggers(oid),
        body,
        format!("REVOKE EXECUTE ON FUNCTION {function}() FROM PUBLIC"),
        format!(
            "CREATE TRIGGER partner_api_orders AFTER INSERT OR UPDATE OR DELETE ON {relation} \
             FOR EACH ROW EXECUTE FUNCTION {function}()"
        ),
        format!(
            "CREATE TRIGGER partner_orders_refuse_truncate BEFORE TRUNCATE ON {relation} \
             FOR EACH STATEMENT EXECUTE FUNCTION {schema}.partner_api_refuse_truncate()"
        ),
    ]
}

/// An order's fields besides its organization and id: the event's columns that hold them as
/// written are these with `new_` before (migration `20261212000001_render_at_stamping`), the
/// trigger's variables they are read into these with `written_` or `before_`.
const ORDER_FIELDS: [&str; 9] = [
    "providers",
    "advertiser_name",
    "campaign_name",
    "budget_dkk",
    "start_date",
    "end_date",
    "status",
    "external_reference",
    "created_at",
];

/// [`ORDER_FIELDS`] each after `prefix` (`t.`, `new_`, `written_`, `before_`), in their
/// order.
fn prefixed_fields(prefix: &str) -> String {
    ORDER_FIELDS
        .map(|field| format!("{prefix}{field}"))
        .join(", ")
}

/// True for an order whose snapshot the stamping could not render, as it checks before
/// rendering (migration `20261212000001_render_at_stamping`): providers of more than one
/// dimension, or more of them or of text than a jsonb value holds. Such an order is
/// unshowable, as the trigger's exception block made it when the trigger rendered.
fn unrenderable(field: impl Fn(&str) -> String) -> String {
    let [id, providers, advertiser_name, campaign_name, status, external_reference] =
        TEXT_FIELDS.map(&field);
    format!(
        "pg_catalog.array_ndims({providers}) OPERATOR(pg_catalog.<>) 1 \
         OR pg_catalog.cardinality({providers}) OPERATOR(pg_catalog.>) 10000000 \
         OR pg_catalog.octet_length({id})::bigint \
            OPERATOR(pg_catalog.+) pg_catalog.octet_length({advertiser_name})::bigint \
            OPERATOR(pg_catalog.+) pg_catalog.octet_length({campaign_name})::bigint \
            OPERATOR(pg_catalog.+) pg_catalog.octet_length({status})::bigint \
            OPERATOR(pg_catalog.+) pg_catalog.octet_length({external_reference})::bigint \
            OPERATOR(pg_catalog.+) pg_catalog.octet_length( \
                pg_catalog.array_to_string({providers}, ''))::bigint \
            OPERATOR(pg_catalog.>=) 250000000::bigint"
    )
}

/// The trigger's block that reads `row` (`OLD` or `NEW`) through the map (`list`, and
/// `keys`: the organization's and id's items) into `{old|new}_org`, `_id`, `_row` and the
/// checked snapshot `_shown` (`shown`, of [`shown`]). A row the map cannot show whole still has its
/// organization and id when those convert; one without is in no feed. `_row`, the mapped row
/// whole, is made for an update only, the one change that compares it: an insert or a
/// deletion would spend about a tenth of its trigger's cost on a value nobody reads.
fn read_through_map(row: &str, list: &str, keys: &str, shown: &str) -> String {
    let prefix = row.to_ascii_lowercase();
    format!(
        "        BEGIN
            SELECT t.organization_id, t.id,
                   CASE WHEN TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN pg_catalog.to_jsonb(t) END,
                   {shown}
                INTO {prefix}_org, {prefix}_id, {prefix}_row, {prefix}_shown
                FROM (SELECT {list} FROM (SELECT {row}.*) AS r) AS t;
        EXCEPTION WHEN OTHERS THEN
            {prefix}_row := NULL;
            {prefix}_shown := NULL;
            BEGIN
                SELECT {keys} INTO {prefix}_org, {prefix}_id FROM (SELECT {row}.*) AS r;
            EXCEPTION WHEN OTHERS THEN
                {prefix}_org := NULL;
            END;
        END;"
    )
}

/// A statement that drops every trigger of the crate's (a function of the crate's schema
/// named `partner_api_...`) on the table `oid`, under any name, from an earlier registration
/// or `partner_api_serve_orders_table`, so nothing is logged or raised twice.
fn drop_crate_triggers(oid: u32) -> String {
    format!(
        "DO $partner_api$ DECLARE old_trigger name; BEGIN \
           FOR old_trigger IN \
             SELECT t.tgname FROM pg_catalog.pg_trigger t \
             JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid \
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
             WHERE t.tgrelid = {oid}::oid AND NOT t.tgisinternal \
               AND n.nspname = pg_catalog.current_schema() \
               AND p.proname::text LIKE 'partner\\_api\\_%' \
           LOOP \
             EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', old_trigger, {oid}::oid::regclass); \
           END LOOP; \
         END $partner_api$"
    )
}

/// The statements that make the organizations' trigger for `table` read through
/// `organizations`.
pub(in crate::store::postgres) fn organizations_trigger(
    schema: &str,
    table: &Table,
    organizations: &OrganizationsMap,
) -> Vec<String> {
    let function = format!("{schema}.{}", function_for("organizations", table));
    let relation = &table.name;
    let list = organizations.select_list();
    let body = format!(
        r#"
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql SET search_path = {EXPRESSION_SEARCH_PATH} AS $partner_api$
#variable_conflict use_column
BEGIN
    -- No check of the table: the function only tells the caches to forget (what any role
    -- may say with NOTIFY), and runs with the rights of whoever writes.
    -- The keys' caches forget every key when an organization is renamed or gone (its keys
    -- then look up as unknown): rare, and a key's answer names its organization.
    IF TG_OP = 'UPDATE' THEN
        BEGIN
            IF NOT EXISTS (SELECT {list} FROM old_rows EXCEPT SELECT {list} FROM new_rows) THEN
                RETURN NULL;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    ELSIF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM old_rows) THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM pg_catalog.pg_notify('partner_api_keys', '*');
    RETURN NULL;
END
$partner_api$"#
    );
    vec![
        drop_crate_triggers(table.oid),
        body,
        format!("REVOKE EXECUTE ON FUNCTION {function}() FROM PUBLIC"),
        format!(
            "CREATE TRIGGER partner_api_organizations_update AFTER UPDATE ON {relation} \
             REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows \
             FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        ),
        format!(
            "CREATE TRIGGER partner_api_organizations_delete AFTER DELETE ON {relation} \
             REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        ),
        format!(
            "CREATE TRIGGER partner_api_organizations_truncate AFTER TRUNCATE ON {relation} \
             FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        ),
    ]
}

/// The statement that lets the crate's tables hold the host's organization ids: the
/// references of the crate's own tables (`partner_...` of its schema) to
/// `partner_organizations` dropped; a host table's are left alone.
pub(in crate::store::postgres) fn drop_organization_references() -> String {
    "DO $partner_api$ DECLARE reference record; BEGIN \
           FOR reference IN \
             SELECT c.conrelid::regclass AS relation, c.conname FROM pg_catalog.pg_constraint c \
             JOIN pg_catalog.pg_class r ON r.oid = c.conrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace \
             WHERE c.contype = 'f' \
               AND c.confrelid = pg_catalog.to_regclass(pg_catalog.quote_ident(pg_catalog.current_schema()) || '.partner_organizations') \
               AND n.nspname = pg_catalog.current_schema() AND r.relname::text LIKE 'partner\\_%' \
           LOOP \
             EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', \
                                       reference.relation, reference.conname); \
           END LOOP; \
         END $partner_api$"
        .to_owned()
}
