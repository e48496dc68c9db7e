# shellcheck shell=bash
# Sourced by .ci/run before the tests: a throw-away PostgreSQL cluster on a loopback port for the
# publication-service tests. Idempotent: a second run reuses the installed packages and, when it
# is still up, the running cluster. Exports ATTESTED_REPLAY_TEST_PG_DSN.

# Executed instead of sourced, the export below would be lost with the child shell.
if ! (return 0 2>/dev/null); then
  echo "services.sh: source it (. .ci/services.sh) so that the DSN reaches the tests" >&2
  exit 2
fi

_pg_port="${ATTESTED_REPLAY_PG_PORT:-55432}"
_pg_root="${ATTESTED_REPLAY_PG_ROOT:-/tmp/attested-replay-pg}"
_pg_password="attested-replay-ci"

_pg_bindir() {
  local candidate
  for candidate in /usr/lib/postgresql/*/bin; do
    if [ -x "$candidate/initdb" ]; then
      echo "$candidate"
    fi
  done | sort -V | tail -n 1
}

if [ -z "$(_pg_bindir)" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "services.sh: PostgreSQL is not installed and this is not root" >&2
    return 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
_pg_bin="$(_pg_bindir)"

# initdb and postgres refuse to run as root; run them as the packaged `postgres` user.
_pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if ! _pg_as_owner "$_pg_bin/pg_isready" -q -h 127.0.0.1 -p "$_pg_port"; then
  mkdir -p "$_pg_root"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$_pg_root"
  fi
  if [ ! -f "$_pg_root/data/PG_VERSION" ]; then
    # Inside the cluster's own directory: the owner can read it even when $TMPDIR is private.
    _pg_pwfile="$_pg_root/initdb-password"
    printf '%s\n' "$_pg_password" >"$_pg_pwfile"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$_pg_pwfile"
    fi
    # --no-locale: a fresh machine's $LANG may name a locale that was never generated.
    _pg_as_owner "$_pg_bin/initdb" -D "$_pg_root/data" -U attested_replay \
      --pwfile="$_pg_pwfile" --auth=scram-sha-256 -E UTF8 --no-locale >/dev/null
    rm -f "$_pg_pwfile"
  fi
  _pg_as_owner "$_pg_bin/pg_ctl" -D "$_pg_root/data" -l "$_pg_root/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $_pg_port -k $_pg_root -c max_connections=200 -c fsync=off" \
    start >/dev/null
fi

# No pipe into `grep -q` here: under pipefail its early exit can fail psql with SIGPIPE.
# The version's own psql, not Debian's pg_wrapper, so no cluster configuration is needed.
_pg_exists="$(PGPASSWORD="$_pg_password" "$_pg_bin/psql" -h 127.0.0.1 -p "$_pg_port" \
  -U attested_replay -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = 'attested_replay_test'")"
if [ "$_pg_exists" != "1" ]; then
  PGPASSWORD="$_pg_password" "$_pg_bin/psql" -h 127.0.0.1 -p "$_pg_port" -U attested_replay \
    -d postgres -qc "CREATE DATABASE attested_replay_test" >/dev/null
fi

export ATTESTED_REPLAY_TEST_PG_DSN="postgresql://attested_replay:${_pg_password}@127.0.0.1:${_pg_port}/attested_replay_test"
echo "services.sh: PostgreSQL ready on 127.0.0.1:${_pg_port}"
unset _pg_port _pg_root _pg_password _pg_bin _pg_pwfile _pg_exists
unset -f _pg_bindir _pg_as_owner
