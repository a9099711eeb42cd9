//! The trust boundaries in the host's database, attacked as each documented role would: our
//! functions cannot be attached to a table of the attacker's, steered by a temporary object
//! named like one of our tables, or called where only our triggers should call them; and
//! every SECURITY DEFINER function pins its search path and is not executable by PUBLIC.
#![cfg(feature = "postgres")]

use partner_api::seed::Seed;
use partner_api::PgStore;
use sqlx::{Connection, Executor, PgConnection};

use crate::common::pg::{as_user, create_documented_roles, fresh_database};

/// The trigger functions the migrations create.
const TRIGGER_FUNCTIONS: [&str; 15] = [
    "partner_api_carry_last_changes",
    "partner_api_raise_order_events",
    "partner_api_refuse_truncate",
    "partner_api_audit_disabled_by_delivery",
    "partner_api_audit_key_leaked",
    "partner_api_audit_reserved_actors",
    "partner_api_enabled_by_admins",
    "partner_api_notify_orders",
    "partner_api_notify_all_orders",
    "partner_api_notify_all_keys",
    "partner_api_notify_inserted_keys",
    "partner_api_notify_updated_keys",
    "partner_api_notify_deleted_keys",
    "partner_api_notify_renamed_organizations",
    "partner_api_notify_deleted_organizations",
];

/// Those of them that run as the owner (SECURITY DEFINER), in name order: PUBLIC may not
/// execute them, so no other role can attach them to a table at all.
const DEFINERS: [&str; 12] = [
    "partner_api_audit_disabled_by_delivery",
    "partner_api_audit_key_leaked",
    "partner_api_carry_last_changes",
    "partner_api_open_feeds_for_webhooks",
    "partner_api_order_changes_after",
    "partner_api_prune_audit",
    "partner_api_prune_order_events",
    "partner_api_raise_order_events",
    "partner_api_read_order_events",
    "partner_api_recorded_last_change",
    "partner_api_stamp_for_webhooks",
    "partner_api_stamp_order_events",
];

/// The tables our functions read or write, each shadowed by a temporary view in the attack.
const SHADOWED: [(&str, &str); 10] = [
    (
        "partner_api_order_events",
        "SELECT 1::bigint AS id, 'org_demo'::text AS organization_id, \
         'order.created'::text AS change, 'ord_demo'::text AS order_id, NULL::jsonb AS order_row, \
         now() AS created_at, NULL::bigint AS position",
    ),
    (
        "partner_api_pruned_events",
        "SELECT 'org_demo'::text AS organization_id, 1::bigint AS first_position, \
         ARRAY[1]::bigint[] AS ids, 1::bigint AS min_id, 1::bigint AS max_id, now() AS pruned_at",
    ),
    (
        "partner_api_event_retention",
        "SELECT true AS only_row, ''::text AS next_organization",
    ),
    (
        "partner_api_event_feeds",
        "SELECT 'org_demo'::text AS organization_id, 0::bigint AS last_position, \
         0::bigint AS pruned_through_id",
    ),
    (
        "partner_api_audit_log",
        "SELECT 1::bigint AS id, 'org_demo'::text AS organization_id, ''::text AS action",
    ),
    (
        "partner_webhook_endpoints",
        "SELECT 1::bigint AS id, 'org_demo'::text AS organization_id, true AS enabled, \
         '{}'::text[] AS events",
    ),
    (
        "partner_webhook_messages",
        "SELECT 1::bigint AS id, ''::text AS organization_id, ''::text AS event_type, \
         ''::text AS order_id, NULL::jsonb AS order_row",
    ),
    (
        "partner_webhook_deliveries",
        "SELECT 1::bigint AS message_id, 1::bigint AS endpoint_id, ''::text AS order_id",
    ),
    (
        "partner_api_order_tables",
        "SELECT 0::oid::regclass AS relid",
    ),
    ("partner_orders", "SELECT ''::text AS organization_id"),
];

/// A database migrated and seeded by its owner, an enabled webhook endpoint for `org_demo`, the
/// documented roles and an order writer (as the hosting page describes it); their names:
/// serving, key admin, order writer, delivering.
async fn attacked_database() -> (String, [String; 4]) {
    let url = fresh_database().await;
    let owner = PgStore::connect_lazy(&url).unwrap();
    owner.migrate().await.unwrap();
    owner.load_seed(&Seed::demo()).await.unwrap();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let [serving, keys, delivering] = create_documented_roles(&url).await;
    let roles = [serving, keys, format!("{database}_writer"), delivering];
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let writer = &roles[2];
    admin
        .execute(format!("DROP ROLE IF EXISTS {writer}").as_str())
        .await
        .unwrap();
    admin
        .execute(
            format!(
                "CREATE ROLE {writer} LOGIN PASSWORD 'change me'; \
                 GRANT USAGE ON SCHEMA public TO {writer}; \
                 GRANT INSERT ON partner_orders TO {writer}; \
                 GRANT CREATE ON SCHEMA public TO {writer}; \
                 INSERT INTO partner_webhook_endpoints (organization_id, url, secret) \
                 VALUES ('org_demo', 'https://hooks.example/orders', 'whsec_dGVzdA==');"
            )
            .as_str(),
        )
        .await
        .unwrap();
    (url, roles)
}

/// What the attacks must not change: the outbox's and the events' sizes, and each
/// role's rights on the tables that hold keys and secrets.
async fn state(admin: &mut PgConnection, roles: &[String]) -> Vec<String> {
    let mut state: Vec<String> = sqlx::query_scalar(
        "SELECT format('%s messages, %s events', \
                (SELECT count(*) FROM partner_webhook_messages), \
                (SELECT count(*) FROM partner_api_order_events))",
    )
    .fetch_all(&mut *admin)
    .await
    .unwrap();
    for role in roles {
        let rights: String = sqlx::query_scalar(
            "SELECT format('%s: keys %s/%s/%s, endpoints %s/%s', $1::text, \
                has_table_privilege($1, 'partner_api_keys', 'INSERT'), \
                has_table_privilege($1, 'partner_api_keys', 'DELETE'), \
                has_table_privilege($1, 'partner_api_keys', 'TRUNCATE'), \
                has_table_privilege($1, 'partner_webhook_endpoints', 'SELECT'), \
                has_table_privilege($1, 'partner_webhook_endpoints', 'INSERT'))",
        )
        .bind(role)
        .fetch_one(&mut *admin)
        .await
        .unwrap();
        state.push(rights);
    }
    state
}

#[tokio::test]
async fn no_documented_role_can_turn_our_functions_against_the_database() {
    crate::common::needs::needs!(Postgres);
    let (url, roles) = attacked_database().await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let before = state(&mut admin, &roles).await;

    for role in &roles {
        let mut attacker = PgConnection::connect(&as_user(&url, role)).await.unwrap();
        // A function of the attacker's that takes every right, if only the owner ran it.
        attacker
            .execute(
                "CREATE FUNCTION pg_temp.take_everything() RETURNS boolean LANGUAGE plpgsql AS $$ \
                 BEGIN \
                     EXECUTE format('GRANT ALL ON ALL TABLES IN SCHEMA public TO %I', session_user); \
                     RETURN true; \
                 END $$",
            )
            .await
            .unwrap();
        // Temporary views in front of our tables, whose rows call it.
        for (table, columns) in SHADOWED {
            attacker
                .execute(
                    format!(
                        "CREATE TEMP VIEW {table} AS {columns} WHERE pg_temp.take_everything()"
                    )
                    .as_str(),
                )
                .await
                .unwrap();
        }
        // The writer may also create functions in the crate's schema (as every role could on
        // PostgreSQL 14 and older): functions matching our calls of built-ins more exactly
        // than pg_catalog's own must never be the ones called.
        if role.ends_with("_writer") {
            for signature in [
                "public.cardinality(text[]) RETURNS integer",
                "public.to_jsonb(public.partner_orders) RETURNS jsonb",
            ] {
                let returned = if signature.ends_with("integer") {
                    "0"
                } else {
                    "'{}'::jsonb"
                };
                attacker
                    .execute(
                        format!(
                            "CREATE FUNCTION {signature} LANGUAGE plpgsql AS $$ BEGIN \
                             PERFORM pg_temp.take_everything(); RETURN {returned}; END $$"
                        )
                        .as_str(),
                    )
                    .await
                    .unwrap();
            }
            // An operator more exact than pg_catalog's for `jsonb -> 'literal'` (which has
            // no `->(jsonb, jsonb)`): the feed's views must not call it.
            attacker
                .execute(
                    "CREATE FUNCTION public.take_arrow(jsonb, jsonb) RETURNS jsonb \
                     LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_temp.take_everything(); \
                     RETURN NULL; END $$; \
                     CREATE OPERATOR public.-> (LEFTARG = jsonb, RIGHTARG = jsonb, \
                     FUNCTION = public.take_arrow)",
                )
                .await
                .unwrap();
        }
        // Each of our trigger functions attached to a table of the attacker's, with the
        // columns of an order: refused when attached (the SECURITY DEFINER one, which PUBLIC
        // may not execute), or when it fires.
        for (n, function) in TRIGGER_FUNCTIONS.iter().enumerate() {
            let table = format!("pg_temp.bait_{n}");
            attacker
                .execute(
                    format!(
                        "CREATE TABLE {table} (organization_id text, id text, providers text[], \
                         advertiser_name text, campaign_name text, budget_dkk bigint, \
                         start_date date, end_date date, status text, external_reference text, \
                         created_at timestamptz)"
                    )
                    .as_str(),
                )
                .await
                .unwrap();
            let attached = attacker
                .execute(
                    format!(
                        "CREATE TRIGGER bait AFTER INSERT ON {table} \
                         FOR EACH ROW EXECUTE FUNCTION {function}()"
                    )
                    .as_str(),
                )
                .await;
            if DEFINERS.contains(function) {
                let err = attached.expect_err(&format!("{role} attached {function}"));
                assert_eq!(sqlstate(&err), "42501", "{role}: {function}: {err}");
                continue;
            }
            attached.unwrap_or_else(|err| panic!("{role} could not attach {function}: {err}"));
            let fired = attacker
                .execute(
                    format!(
                        "INSERT INTO {table} VALUES ('org_demo', 'ord_forged', '{{meta}}', 'A', \
                         'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now())"
                    )
                    .as_str(),
                )
                .await;
            let err = fired.expect_err(&format!("{role}: {function} ran for a table of its own"));
            assert!(
                err.to_string().contains("does not serve the table") && sqlstate(&err) == "42501",
                "{role}: {function}: {err}"
            );
        }
        // The functions only our triggers call: not callable at all.
        for call in ["SELECT partner_api_serve_orders_table('pg_temp.bait_0')"] {
            let err = attacker
                .execute(call)
                .await
                .expect_err(&format!("{role} could run {call}"));
            assert_eq!(sqlstate(&err), "42501", "{role}: {call}: {err}");
        }
        // The feed's functions: the serving role's (and delivering's, a member of it) only,
        // and with the views in place they work on our tables. No role writes a position or
        // deletes an event but through them.
        let serves = role.ends_with("_serving") || role.ends_with("_delivering");
        for call in [
            "SELECT partner_api_stamp_order_events('org_demo', 100)",
            "SELECT count(*) FROM partner_api_read_order_events('org_demo', NULL, 100, \
             ARRAY['order.created'], false, NULL, 1000)",
            "SELECT count(*) FROM partner_api_read_order_events('org_demo', NULL, 100, \
             ARRAY['order.created'], false, ARRAY['meta'], 1000)",
            "SELECT * FROM partner_api_prune_order_events(3153600000, 10, 100)",
            "SELECT * FROM partner_api_order_changes_after(0)",
        ] {
            let result = attacker.execute(call).await;
            if serves {
                result.unwrap_or_else(|err| panic!("{role} could not run {call}: {err}"));
            } else {
                let err = result.expect_err(&format!("{role} could run {call}"));
                assert_eq!(sqlstate(&err), "42501", "{role}: {call}: {err}");
            }
        }
        // The webhooks' stamping (which writes the outbox from the events): the delivering
        // role's only.
        for call in [
            "SELECT partner_api_open_feeds_for_webhooks(10)",
            "SELECT partner_api_stamp_for_webhooks(10, 10)",
        ] {
            let stamping = attacker.execute(call).await;
            if role.ends_with("_delivering") {
                stamping.unwrap_or_else(|err| panic!("{role} could not run {call}: {err}"));
            } else {
                let err = stamping.expect_err(&format!("{role} could run {call}"));
                assert_eq!(sqlstate(&err), "42501", "{role}: {call}: {err}");
            }
        }
        // No documented role locks retention (it runs only through its call, which holds the
        // lock for one short transaction), nor deletes tombstones.
        for write in [
            "UPDATE public.partner_api_order_events SET position = 0",
            "DELETE FROM public.partner_api_order_events",
            "UPDATE public.partner_api_event_feeds SET pruned_through_id = 0",
            "SELECT * FROM public.partner_api_event_retention FOR UPDATE",
            "SELECT * FROM public.partner_api_event_retention FOR KEY SHARE",
            "DELETE FROM public.partner_api_pruned_events",
        ] {
            let err = attacker
                .execute(write)
                .await
                .expect_err(&format!("{role} could run {write}"));
            assert_eq!(sqlstate(&err), "42501", "{role}: {write}: {err}");
        }
        // What the role may do for real, with the views in place: our triggers fire and must
        // read our tables, not the views.
        let legitimate = match role.rsplit('_').next().unwrap() {
            "writer" => {
                "INSERT INTO public.partner_orders VALUES ('org_demo', 'ord_by_writer', \
                 ARRAY['meta'], 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now())"
            }
            // A key marked leaked, as a leak report does: the trigger writes the real log.
            "keys" => {
                "UPDATE public.partner_api_keys SET expires_at = now() + interval '1 day'; \
                 UPDATE public.partner_api_keys SET leak_reported_at = now(), \
                     leak_url = 'https://github.com/o/r/blob/main/.env' \
                 WHERE id = (SELECT min(id) FROM public.partner_api_keys)"
            }
            // Delivery disabling the endpoint (last: the writer's order has raised its event),
            // as its finishing statement does: the trigger writes the real log, not the view.
            // Enabling it again is not delivery's to do: refused, so no second entry.
            "delivering" => {
                let err = attacker
                    .execute(
                        "SET partner_api.disable_reason = 'gone'; \
                         UPDATE public.partner_webhook_endpoints SET enabled = false; \
                         UPDATE public.partner_webhook_endpoints SET enabled = true",
                    )
                    .await
                    .expect_err("the delivering role enabled an endpoint");
                assert_eq!(sqlstate(&err), "42501", "{err}");
                "SET partner_api.disable_reason = 'gone'; \
                 UPDATE public.partner_webhook_endpoints SET enabled = false"
            }
            _ => "UPDATE public.partner_api_keys SET last_used_at = now()",
        };
        attacker.execute(legitimate).await.unwrap();
    }
    // The webhooks of what is not stamped yet, as the dispatcher's next claim writes them.
    admin
        .execute(
            "SELECT partner_api_open_feeds_for_webhooks(100); \
             SELECT partner_api_stamp_for_webhooks(100, 1000)",
        )
        .await
        .unwrap();

    let after = state(&mut admin, &roles).await;
    // The writer's order raised its event (for the real endpoint) and its webhook; nothing
    // else was raised, and no right changed.
    let expected_counts = {
        let (messages, changes): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM partner_webhook_messages WHERE order_id = 'ord_by_writer'), \
                    (SELECT count(*) FROM partner_api_order_events)",
        )
        .fetch_one(&mut admin)
        .await
        .unwrap();
        assert_eq!(messages, 1, "the writer's order raised no event");
        format!("{messages} messages, {changes} events")
    };
    let before_changes: i64 = before[0]
        .split(", ")
        .nth(1)
        .and_then(|changes| changes.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        after[0],
        format!("1 messages, {} events", before_changes + 1),
        "an attack raised an event"
    );
    assert_eq!(after[0], expected_counts);
    assert_eq!(after[1..], before[1..], "an attack changed a role's rights");
    let forged: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM partner_webhook_messages WHERE order_id = 'ord_forged'",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(forged, 0);
    // The writer's order is in the feed once, stamped by delivering's round after it; nothing
    // forged is.
    let (events, stamped, forged_events): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE order_id = 'ord_by_writer'), \
                count(position) FILTER (WHERE order_id = 'ord_by_writer'), \
                count(*) FILTER (WHERE order_id = 'ord_forged') \
         FROM partner_api_order_events",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!((events, stamped, forged_events), (1, 1, 0));
    // Delivery's disabling has its one entry, in the real log.
    let disabled: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT action, actor, detail FROM partner_api_audit_log \
         WHERE target = (SELECT id::text FROM partner_webhook_endpoints) \
           AND action LIKE 'webhook.%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(
        disabled,
        [(
            "webhook.disabled".to_owned(),
            partner_api::store::DELIVERY_ACTOR.to_owned(),
            Some("gone".to_owned())
        )]
    );
    // The leaked key has its one entry, in the real log.
    let leaked: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT actor, detail FROM partner_api_audit_log WHERE action = 'key.leaked'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(
        leaked,
        [(
            partner_api::store::SECRET_SCANNING_ACTOR.to_owned(),
            Some("https://github.com/o/r/blob/main/.env".to_owned())
        )]
    );
}

/// The SQLSTATE of a database error ("" for another error).
fn sqlstate(err: &sqlx::Error) -> String {
    err.as_database_error()
        .and_then(|err| err.code())
        .map(|code| code.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn every_function_of_ours_pins_its_search_path_and_no_definer_runs_for_public() {
    crate::common::needs::needs!(Postgres);
    let url = fresh_database().await;
    let owner = PgStore::connect_lazy(&url).unwrap();
    owner.migrate().await.unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let functions: Vec<(String, bool, Vec<String>, bool)> = sqlx::query_as(
        "SELECT p.proname::text, p.prosecdef, coalesce(p.proconfig, '{}'), \
                EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a \
                        WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') \
         FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace \
         ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(functions.len() >= TRIGGER_FUNCTIONS.len(), "{functions:?}");
    let schema: String = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    for (name, definer, config, public) in &functions {
        assert!(
            name.starts_with("partner_api_"),
            "a function not ours: {name}"
        );
        // Retention's call also bounds its wait for the retention lock.
        let pinned = format!("search_path={schema}, pg_temp");
        let expected = if name == "partner_api_prune_order_events" {
            vec![pinned, "lock_timeout=2s".to_owned()]
        } else {
            vec![pinned]
        };
        assert_eq!(config, &expected, "{name} does not pin its search path");
        if *definer {
            assert!(!public, "PUBLIC may execute the SECURITY DEFINER {name}");
        }
    }
    let definers: Vec<&str> = functions
        .iter()
        .filter(|f| f.1)
        .map(|f| f.0.as_str())
        .collect();
    assert_eq!(definers, DEFINERS);
}

#[tokio::test]
async fn a_host_table_of_orders_served_through_the_owner_function_raises_its_events() {
    crate::common::needs::needs!(Postgres);
    let (url, _) = attacked_database().await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    admin
        .execute(
            "CREATE TABLE host_orders (LIKE partner_orders INCLUDING ALL); \
             SELECT partner_api_serve_orders_table('host_orders'); \
             INSERT INTO host_orders VALUES ('org_demo', 'ord_in_host_table', ARRAY['meta'], \
             'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now()); \
             SELECT partner_api_open_feeds_for_webhooks(100); \
             SELECT partner_api_stamp_for_webhooks(100, 1000);",
        )
        .await
        .unwrap();
    let (messages, changes): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM partner_webhook_messages WHERE order_id = 'ord_in_host_table'), \
                (SELECT count(*) FROM partner_api_order_events WHERE order_id = 'ord_in_host_table')",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!((messages, changes), (1, 1));
    // And its event is the newest of the organization's feed (after the seed's).
    use partner_api::store::{EventFeed, EventQuery, EventsPage};
    let store = PgStore::connect_lazy(&url).unwrap();
    let mut query = EventQuery::oldest(100);
    let mut newest = None;
    loop {
        let page = store.events("org_demo", &query).await.unwrap();
        let EventsPage::Events { events, .. } = page else {
            panic!("{page:?}")
        };
        let Some(last) = events.last() else { break };
        query = EventQuery::after(last.id, 100);
        newest = Some(last.clone());
    }
    let event = newest.expect("the organization's feed is empty");
    let data: serde_json::Value = serde_json::from_slice(&event.data).unwrap();
    assert_eq!(data["id"], "ord_in_host_table");
    assert_eq!(event.change, partner_api::store::OrderChange::Created);
}

/// The deprecated calls' table, as each documented role: the key admin and the order writer
/// read (or not) and write nothing; the serving role (and delivering, a member of it) counts,
/// but no value a reader cannot hold gets in, and no count of a key that does not exist.
#[tokio::test]
async fn the_deprecated_calls_table_takes_from_each_role_only_what_it_is_granted() {
    crate::common::needs::needs!(Postgres);
    let (url, roles) = attacked_database().await;
    let [serving, keys, writer, delivering] = &roles;
    let insert = |day: &str, target: &str, last: &str, key: &str| {
        format!(
            "INSERT INTO public.partner_api_deprecated_calls (key_id, day, target, calls, \
             last_call_at) VALUES ({key}, '{day}', '{target}', 1, '{last}')"
        )
    };
    let valid = insert(
        "2026-11-26 00:00:00+00",
        "/orders?provider",
        "2026-11-26 10:00:00+00",
        "(SELECT min(id) FROM public.partner_api_keys)",
    );
    for role in [keys, writer] {
        let mut attacker = PgConnection::connect(&as_user(&url, role)).await.unwrap();
        for write in [
            valid.as_str(),
            "UPDATE public.partner_api_deprecated_calls SET calls = 1000000",
            "DELETE FROM public.partner_api_deprecated_calls",
        ] {
            let err = attacker
                .execute(write)
                .await
                .expect_err(&format!("{role} could run {write}"));
            assert_eq!(sqlstate(&err), "42501", "{role}: {write}: {err}");
        }
        let read = attacker
            .execute("SELECT * FROM public.partner_api_deprecated_calls")
            .await;
        assert_eq!(read.is_ok(), role == keys, "{role} reading: {read:?}");
    }
    for role in [serving, delivering] {
        let mut counter = PgConnection::connect(&as_user(&url, role)).await.unwrap();
        // The recorder's upsert that adds.
        let counted = format!(
            "{valid} ON CONFLICT (key_id, target, day) \
             DO UPDATE SET calls = partner_api_deprecated_calls.calls + 1"
        );
        counter
            .execute(counted.as_str())
            .await
            .unwrap_or_else(|err| panic!("{role}: {err}"));
        let key = "(SELECT min(id) FROM public.partner_api_keys)";
        for (bad, state) in [
            (
                insert("infinity", "/me", "2026-11-26 10:00:00+00", key),
                "23514",
            ),
            (
                insert(
                    "2026-11-26 05:00:00+00",
                    "/me",
                    "2026-11-26 10:00:00+00",
                    key,
                ),
                "23514",
            ),
            (
                insert("2026-11-26 00:00:00+00", "/me", "infinity", key),
                "23514",
            ),
            (
                insert(
                    "2026-11-26 00:00:00+00",
                    "/admin",
                    "2026-11-26 10:00:00+00",
                    key,
                ),
                "23514",
            ),
            (
                insert(
                    "2026-11-26 00:00:00+00",
                    "/me",
                    "2026-11-26 10:00:00+00",
                    "-1",
                ),
                "23503",
            ),
        ] {
            let err = counter
                .execute(bad.as_str())
                .await
                .expect_err(&format!("{role} wrote {bad}"));
            assert_eq!(sqlstate(&err), state, "{role}: {bad}: {err}");
        }
    }
}

/// What a key or an endpoint is answered at is its admin's to change: the serving, order
/// writing and delivering roles cannot pin a key or an endpoint to another version, open a
/// way back, or count calls under a made-up version name; the key admin can pin, within the
/// rollback's check.
#[tokio::test]
async fn only_the_key_admin_changes_what_version_a_key_or_endpoint_reads() {
    crate::common::needs::needs!(Postgres);
    let (url, roles) = attacked_database().await;
    let [serving, keys, writer, delivering] = &roles;
    for role in [serving, writer, delivering] {
        let mut attacker = PgConnection::connect(&as_user(&url, role)).await.unwrap();
        for write in [
            "UPDATE public.partner_api_keys SET api_version = '2026-11-28'",
            "UPDATE public.partner_api_keys SET api_version_rollback_to = '2026-11-27', \
             api_version_rollback_until = now() + interval '10 years'",
            "UPDATE public.partner_webhook_endpoints SET api_version = '2026-11-27'",
        ] {
            let err = attacker
                .execute(write)
                .await
                .expect_err(&format!("{role} could run {write}"));
            assert_eq!(sqlstate(&err), "42501", "{role}: {write}: {err}");
        }
    }
    let mut counter = PgConnection::connect(&as_user(&url, serving))
        .await
        .unwrap();
    let err = counter
        .execute(
            "INSERT INTO public.partner_api_deprecated_calls (key_id, day, target, calls, \
             last_call_at) VALUES ((SELECT min(id) FROM public.partner_api_keys), \
             '2026-11-26 00:00:00+00', '2026-11-26; DROP', 1, '2026-11-26 10:00:00+00')",
        )
        .await
        .expect_err("a target that is no version was counted");
    assert_eq!(sqlstate(&err), "23514", "{err}");
    let mut admin = PgConnection::connect(&as_user(&url, keys)).await.unwrap();
    admin
        .execute("UPDATE public.partner_api_keys SET api_version = '2026-11-28'")
        .await
        .unwrap();
    let err = admin
        .execute(
            "UPDATE public.partner_api_keys SET api_version_rollback_to = '2026-11-27', \
             api_version_rollback_until = NULL",
        )
        .await
        .expect_err("a way back without its end");
    assert_eq!(sqlstate(&err), "23514", "{err}");
}

/// What a key may read (its permissions and providers) is the key admin's to change: the
/// other documented roles, and a role that writes orders, may neither widen nor narrow it,
/// nor write or read the carried last changes of orders; the key admin writes only what the
/// columns' checks allow (known permissions, 1 to 50 providers).
#[tokio::test]
async fn only_the_key_admin_changes_what_a_key_may_read() {
    crate::common::needs::needs!(Postgres);
    let (url, roles) = attacked_database().await;
    let [serving, keys, writer, delivering] = &roles;
    for role in [serving, writer, delivering] {
        let mut attacker = PgConnection::connect(&as_user(&url, role)).await.unwrap();
        for write in [
            "UPDATE public.partner_api_keys SET permissions = NULL",
            "UPDATE public.partner_api_keys SET providers = NULL",
            "INSERT INTO public.partner_api_order_last_changes VALUES ('a', 'o', now())",
            "SELECT * FROM public.partner_api_order_last_changes",
        ] {
            let err = attacker
                .execute(write)
                .await
                .expect_err(&format!("{role} could run {write}"));
            assert_eq!(sqlstate(&err), "42501", "{role}: {write}: {err}");
        }
    }
    let mut admin = PgConnection::connect(&as_user(&url, keys)).await.unwrap();
    admin
        .execute(
            "UPDATE public.partner_api_keys SET permissions = '{orders}', providers = '{meta}'",
        )
        .await
        .unwrap();
    for write in [
        "UPDATE public.partner_api_keys SET permissions = '{orders,admin}'",
        "UPDATE public.partner_api_keys SET providers = '{}'",
        "UPDATE public.partner_api_keys SET providers = ARRAY[NULL]::text[]",
    ] {
        let err = admin
            .execute(write)
            .await
            .expect_err(&format!("the key admin could run {write}"));
        assert_eq!(sqlstate(&err), "23514", "{write}: {err}");
    }
}

/// The capture's state (its slot, its position, its lease) is the owner's alone: no
/// documented role, nor a role that writes orders, may read it, take the lease, move the
/// position (which would let the caches trust events never written) or name another slot.
/// The listener reads the position through `partner_api_order_changes_after` only.
#[tokio::test]
async fn no_role_but_the_owner_touches_the_order_captures_state() {
    crate::common::needs::needs!(Postgres);
    let (url, roles) = attacked_database().await;
    for role in &roles {
        let mut attacker = PgConnection::connect(&as_user(&url, role)).await.unwrap();
        for attack in [
            "SELECT * FROM public.partner_api_order_capture",
            "UPDATE public.partner_api_order_capture SET lease_holder = 'me', \
             lease_until = 'infinity'",
            "UPDATE public.partner_api_order_capture SET materialized_lsn = 'FFFFFFFF/0'",
            "UPDATE public.partner_api_order_capture SET slot_name = 'elsewhere'",
            "DELETE FROM public.partner_api_order_capture",
        ] {
            let err = attacker
                .execute(attack)
                .await
                .expect_err(&format!("{role} could run {attack}"));
            assert_eq!(sqlstate(&err), "42501", "{role}: {attack}: {err}");
        }
    }
}
