#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster for the tests (issue #17) and print
# where it is:
#   1. find initdb and pg_ctl on PATH, else under /usr/lib/postgresql/*/bin
#      (where Debian puts them; scripts/install-deps.sh installs the
#      `postgresql` package, this script installs nothing);
#   2. stop and wipe the cluster an earlier run left, if any;
#   3. initdb a fresh cluster in $GIT_COLLAB_CI_PG_DIR (default
#      /tmp/git-collab-ci-pg, or /tmp/git-collab-ci-pg-UID when not root):
#      superuser `collab`, trust authentication, settings for tests;
#   4. start it listening on 127.0.0.1 only, port 55432 or the next free one,
#      with its unix socket in that directory, and wait until it is ready.
# PostgreSQL refuses to run as root: as root the cluster belongs to the
# `postgres` user (runuser); otherwise it runs as the current user.
#
# Usage:
#   eval "$(bash scripts/ci-postgres.sh)"   # stdout is `export GIT_COLLAB_TEST_POSTGRES=...`
#   bash scripts/ci-postgres.sh --stop       # stop the cluster and remove its directory
# Everything else goes to stderr, so stdout stays eval-able. The tests
# create their own databases through that admin URL.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then
    DIR=${GIT_COLLAB_CI_PG_DIR:-/tmp/git-collab-ci-pg}
else
    DIR=${GIT_COLLAB_CI_PG_DIR:-/tmp/git-collab-ci-pg-$(id -u)}
fi
DATA=$DIR/data
LOG=$DIR/postgres.log
FIRST_PORT=55432
PORT_TRIES=20
SUPERUSER=collab

log() { printf 'ci-postgres: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

case "$DIR" in
    /?*) ;;
    *) die "GIT_COLLAB_CI_PG_DIR must be an absolute path, got '$DIR'" ;;
esac

# 1. Binaries. Debian keeps them out of PATH, one directory per major version.
find_binaries() {
    command -v pg_ctl >/dev/null && command -v initdb >/dev/null && return 0
    local dir
    # The newest major version first.
    while read -r dir; do
        if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then
            PATH="$dir:$PATH"
            return 0
        fi
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r)
    return 1
}

# Runs a PostgreSQL program as the cluster's owner, from a directory it can
# read (the server warns about an unreadable working directory).
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        (cd / && runuser -u "$OWNER" -- "$@")
    else
        (cd / && "$@")
    fi
}

stop_cluster() {
    [ -e "$DIR" ] || [ -L "$DIR" ] || return 0
    if [ -f "$DATA/postmaster.pid" ] && command -v pg_ctl >/dev/null; then
        OWNER=$(stat -c %U "$DATA")
        log "stopping the cluster in $DATA"
        as_owner "$(command -v pg_ctl)" -D "$DATA" -m immediate -w stop >&2 ||
            log "pg_ctl stop failed (already stopped?)"
    fi
    rm -rf "$DIR"
}

find_binaries || true

case "${1:-}" in
    --stop) stop_cluster; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1 (expected --stop)" ;;
esac

command -v pg_ctl >/dev/null && command -v initdb >/dev/null ||
    die "initdb/pg_ctl not found on PATH nor under /usr/lib/postgresql/*/bin; run scripts/install-deps.sh as root (Debian package postgresql)"
PG_CTL=$(command -v pg_ctl)
INITDB=$(command -v initdb)

if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' user to run the cluster as (PostgreSQL refuses to run as root)"
    OWNER=postgres
else
    OWNER=$(id -un)
fi

# 2. A second start replaces the first cluster.
stop_cluster

# 3. A fresh cluster. The directory is also the socket directory.
mkdir -p "$(dirname "$DIR")"
install -d -m 0755 "$DIR"
if [ "$(id -u)" = 0 ]; then chown "$OWNER" "$DIR"; fi
log "initdb in $DATA ($($INITDB --version))"
as_owner "$INITDB" -D "$DATA" -A trust -U "$SUPERUSER" -E UTF8 --locale=C >/dev/null
# Settings for tests: many parallel test databases and connections. fsync
# stays on: the tests exercise the durability the server claims.
cat >>"$DATA/postgresql.conf" <<CONF

# Written by scripts/ci-postgres.sh (git-collab tests).
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
max_connections = 400
shared_buffers = 128MB
fsync = on
CONF

# 4. Start on the first free port. A port can be taken between the check and
# the start, so a failed start moves on to the next port too.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
started=
for port in $(seq "$FIRST_PORT" $((FIRST_PORT + PORT_TRIES - 1))); do
    if port_in_use "$port"; then
        log "port $port is taken"
        continue
    fi
    rm -f "$LOG"
    if as_owner "$PG_CTL" -D "$DATA" -l "$LOG" -w -t 60 -o "-p $port" start >/dev/null; then
        started=$port
        break
    fi
    if grep -q 'could not bind\|Address already in use' "$LOG" 2>/dev/null; then
        log "port $port was taken while starting; trying the next one"
        continue
    fi
    tail -n 20 "$LOG" >&2 || true
    die "PostgreSQL did not start; see $LOG"
done
[ -n "$started" ] || die "no free port in $FIRST_PORT..$((FIRST_PORT + PORT_TRIES - 1))"
echo "$started" >"$DIR/port"

log "ready: PostgreSQL on 127.0.0.1:$started (socket dir $DIR, log $LOG); stop with: bash scripts/ci-postgres.sh --stop"
echo "export GIT_COLLAB_TEST_POSTGRES=postgres://$SUPERUSER@127.0.0.1:$started/postgres"
