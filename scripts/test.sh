#!/usr/bin/env bash
# The test command: sets up what the tests need on a fresh Debian 12 machine
# (system packages, podman and the container image under test, a throwaway
# PostgreSQL cluster) and runs the whole suite with cargo-nextest. Extra
# arguments go to nextest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

# What the setup below starts is stopped on exit, in reverse order.
cleanups=()
run_cleanups() {
    local i
    for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}"; done
}
trap run_cleanups EXIT

# The container tests boot the image built from this tree. Without a
# container engine they skip, unless GIT_COLLAB_REQUIRE_CONTAINER_TESTS=1.
if [ "$(id -u)" = 0 ] || [ -n "${DOCKER_HOST:-}" ]; then
    eval "$(bash scripts/ci-podman-setup.sh)"
    cleanups+=('bash scripts/ci-podman-setup.sh --stop >/dev/null 2>&1 || true')
    bash scripts/ci-build-image.sh
fi

# The PostgreSQL tests create their databases in a throwaway cluster named by
# GIT_COLLAB_TEST_POSTGRES (an admin URL). Without one they skip, unless
# GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1. A URL given by the caller is used as is.
if [ -z "${GIT_COLLAB_TEST_POSTGRES:-}" ] &&
    { [ "$(id -u)" = 0 ] || command -v pg_ctl >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; }; then
    cleanups+=('bash scripts/ci-postgres.sh --stop >/dev/null 2>&1 || true')
    eval "$(bash scripts/ci-postgres.sh)"
    export GIT_COLLAB_TEST_POSTGRES
fi

status=0
cargo nextest run --lib --bins --tests --locked --no-fail-fast "$@" || status=$?

# The same suites once more with the collab database on PostgreSQL
# (GIT_COLLAB_TEST_BACKEND=postgres: each test gets a fresh database): the
# database unit tests, and the server suites whose state lives only in the
# database. (multi_node_test ran above: it always uses PostgreSQL.)
if [ -n "${GIT_COLLAB_TEST_POSTGRES:-}" ] && [ "$#" = 0 ]; then
    echo "== tests again on PostgreSQL"
    GIT_COLLAB_TEST_BACKEND=postgres cargo nextest run --bins --locked --no-fail-fast \
        --test lease_server_test --test lease_concurrency_test --test work_queue_test \
        --test lease_fencing_test --test issue_server_cli_test --test review_verb_test \
        -E 'binary(git-collab-server) and test(/^(db|hooks::fencing)::/) or not binary(git-collab-server)' ||
        status=$?
fi
exit "$status"
