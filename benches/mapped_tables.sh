# Sourced by the order-writes benches: a host's own tables mapped with --schema-map, as the
# hosting page shows them.
#
# make_mapped_database URL WORK: creates the database URL names (on the server of the
# benches' throwaway PostgreSQL), with the hosting page's `accounts` (50) and `media_buys`,
# writes the page's schema map to WORK/schema-map.toml, and registers it with the
# standalone host's `migrate`, building the indexes its `indexes` prints.
make_mapped_database() {
  local url=$1 work=$2
  psql -q "${url%/*}/postgres" -c "CREATE DATABASE ${url##*/}"
  psql -q -v ON_ERROR_STOP=1 "$url" <<'SQL'
CREATE TABLE public.accounts (id bigserial PRIMARY KEY, display_name text NOT NULL);
CREATE TABLE public.media_buys (buy_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id bigint NOT NULL REFERENCES public.accounts (id), channels text[] NOT NULL,
    advertiser text NOT NULL, campaign text NOT NULL, budget_ore bigint NOT NULL,
    starts_on date NOT NULL, ends_on date NOT NULL, state text NOT NULL, po_number text,
    created timestamptz NOT NULL DEFAULT now());
INSERT INTO accounts (display_name) SELECT format('account %s', a) FROM generate_series(1, 50) a;
SQL
  sed -n '/^```toml$/,/^```$/p' src/docs/hosting.md | sed '1d;$d' >"$work/schema-map.toml"
  cargo run -q --example standalone --features postgres -- \
    --database-url "$url" --schema-map "$work/schema-map.toml" migrate >/dev/null
  cargo run -q --example standalone --features postgres -- \
    --database-url "$url" --schema-map "$work/schema-map.toml" indexes |
    while read -r statement; do psql -q "$url" -c "$statement"; done
}
