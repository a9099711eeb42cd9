# Throwaway servers for the tests and the benches, sourced by .ci/test and benches/load.sh:
# `start_postgres` and `start_redis` install Debian's package when it is missing (as root),
# start a server on a free loopback port, export its URL (PARTNER_API_TEST_DATABASE_URL,
# PARTNER_API_TEST_REDIS_URL; a URL already set is used as it is), and register its removal,
# which `stop_servers` does (call it from the caller's EXIT trap).

servers_stop_commands=()

# Removing a server's files is cleanup, not a test: a failure there is reported and does not
# turn the caller's result (it runs in the caller's EXIT trap, under set -e) into a failure.
stop_servers() {
  local command
  for command in "${servers_stop_commands[@]}"; do
    eval "$command" || echo "warning: cleanup of a throwaway server failed: $command" >&2
  done
  servers_stop_commands=()
}

# stop_process PIDFILE: sends SIGTERM to the daemon whose pid is in PIDFILE and waits (up to
# 10 s) until it has exited. A daemon is not our child, so `wait` cannot; and its directory
# cannot be removed while it lives: Redis opens its log file again for every line, so one
# written during shutdown recreated the log in a directory `rm -rf` was emptying ("Directory
# not empty", CI of 543a82e).
stop_process() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    exited "$pid" && return 0
    sleep 0.1
  done
  echo "warning: process $pid did not exit within 10 s of SIGTERM; killing it" >&2
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do
    exited "$pid" && return 0
    sleep 0.1
  done
}

# exited PID: whether the process is gone or a zombie (a daemon's parent is init, which in a
# container may never reap it; a zombie holds no files).
exited() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 0
  [ -z "$state" ] || [ "$state" = Z ]
}

# sweep_stale_servers: removes the data directories of throwaway servers that no longer run.
# A caller killed before its EXIT trap (a session's end, a kill -9) leaves its server's
# directory behind, in memory when under /dev/shm; across runs on one machine these once
# filled its memory. A directory is kept while the shell that made it (its `owner` file)
# lives, or the server (its pid file; PostgreSQL's single-user mode writes its pid negated),
# and while it is younger than 10 minutes (one being made beside us has neither file yet);
# only directories of this user, or of the postgres user the servers run as, are looked at.
sweep_stale_servers() {
  local dir file pid alive
  for dir in /tmp/partner-api-pg.* /dev/shm/partner-api-pg.* /tmp/partner-api-redis.*; do
    [ -d "$dir" ] && [ ! -L "$dir" ] || continue
    [ -n "$(find "$dir" -maxdepth 0 \( -user "$(id -u)" -o -user postgres \) -mmin +10 2>/dev/null)" ] ||
      continue
    alive=
    for file in "$dir/owner" "$dir/pid" "$dir/db/postmaster.pid"; do
      [ -f "$file" ] && [ ! -L "$file" ] || continue
      pid=$(head -n 1 "$file" 2>/dev/null) || pid=
      pid=${pid#-}
      case $pid in '' | *[!0-9]*) continue ;; esac
      if ! exited "$pid"; then alive=1; break; fi
    done
    [ -z "$alive" ] || continue
    if rm -rf "$dir" 2>/dev/null; then
      echo "removed a stopped throwaway server's files: $dir"
    else
      echo "warning: could not remove $dir" >&2
    fi
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# install_packages WHY PACKAGE...: installs Debian packages, or fails saying WHY they are needed.
install_packages() {
  local why=$1
  shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $* (Debian packages) for $why"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "error: $why needs Debian's packages $*" >&2
    return 1
  fi
}

postgres_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

start_postgres() {
  [ -n "${PARTNER_API_TEST_DATABASE_URL:-}" ] && return 0
  sweep_stale_servers
  [ -n "$(postgres_bin)" ] || install_packages "the PostgreSQL tests and benches" postgresql || return 1
  local bin data port
  bin=$(postgres_bin)
  # A full test run leaves about 1.5 GB of databases (each test makes its own): in memory
  # when there is room for four times that, so a nearly full disk fails no test.
  # (A bench's server, whose commits are durable, stays on the disk: PARTNER_API_PG_PARENT.)
  local parent=${PARTNER_API_PG_PARENT:-/tmp}
  if [ -z "${PARTNER_API_PG_PARENT:-}" ] && [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt $((6 * 1024 * 1024)) ]; then
    parent=/dev/shm
  fi
  data=$(mktemp -d "$parent/partner-api-pg.XXXXXX")
  echo $$ >"$data/owner"
  port=$(free_port)
  # initdb and postgres refuse to run as root: use the package's postgres user then.
  local run=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$data"
    run=(runuser -u postgres --)
  fi
  "${run[@]}" "$bin/initdb" -D "$data/db" -U postgres -A trust --no-sync >/dev/null
  # The write-ahead log held to 64 MB between checkpoints (the default keeps 1 GB): the
  # tests' databases are throwaway.
  "${run[@]}" "$bin/pg_ctl" -D "$data/db" -l "$data/log" -w -o \
    "-c listen_addresses=127.0.0.1 -p $port -k $data -c fsync=off -c synchronous_commit=off -c max_connections=200 -c wal_level=logical -c max_replication_slots=100 -c max_wal_size=64MB -c min_wal_size=32MB ${PARTNER_API_POSTGRES_OPTIONS:-}" \
    start >/dev/null
  servers_stop_commands+=("${run[*]} $bin/pg_ctl -D $data/db -m immediate stop >/dev/null 2>&1 || true; rm -rf $data")
  export PARTNER_API_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port"
}

# start_bench_postgres WHY: a throwaway PostgreSQL for a bench, always a new one (never the
# server PARTNER_API_TEST_DATABASE_URL names), with durable commits (fsync and
# synchronous_commit on, as in production), the crate's migrations applied as its owner; sets
# bench_database to its URL. stop_servers removes it.
start_bench_postgres() {
  local PARTNER_API_TEST_DATABASE_URL=
  PARTNER_API_PG_PARENT=/tmp PARTNER_API_POSTGRES_OPTIONS="-c fsync=on -c synchronous_commit=on -c max_wal_size=1GB -c min_wal_size=80MB ${PARTNER_API_POSTGRES_OPTIONS:-}" \
    start_postgres >/dev/null || { echo "error: $1 needs PostgreSQL" >&2; return 1; }
  bench_database=$PARTNER_API_TEST_DATABASE_URL
  local migration
  for migration in src/store/migrations/*.sql; do
    psql -q -v ON_ERROR_STOP=1 "$bench_database" -f "$migration" >/dev/null
  done
}

start_redis() {
  [ -n "${PARTNER_API_TEST_REDIS_URL:-}" ] && return 0
  sweep_stale_servers
  command -v redis-server >/dev/null || install_packages "the Redis tests" redis-server || return 1
  local dir port
  dir=$(mktemp -d /tmp/partner-api-redis.XXXXXX)
  echo $$ >"$dir/owner"
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir" --daemonize yes --pidfile "$dir/pid" --logfile "$dir/log"
  # --daemonize returns before the server listens: wait until it answers.
  servers_stop_commands+=("stop_process $dir/pid; rm -rf $dir")
  local answered=
  for _ in $(seq 1 100); do
    if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then answered=1; break; fi
    sleep 0.1
  done
  if [ -z "$answered" ]; then
    cat "$dir/log" >&2 2>/dev/null || true
    echo "error: the throwaway Redis on 127.0.0.1:$port did not answer within 10 s" >&2
    return 1
  fi
  export PARTNER_API_TEST_REDIS_URL="redis://127.0.0.1:$port/"
  echo "Redis on 127.0.0.1:$port"
}
