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
# (GIT_COLLAB_TEST_BACKEND=postgres: each server and each database unit test
# gets a fresh database): the database unit tests and every server suite,
# except those that open the SQLite file itself (imports, crash and restore
# tests, the upgrade from an old file), the client-only, container, Nix and
# browser suites, and maintenance_test (git housekeeping, no database).
# multi_node_test and db_migrate_test ran above: they always use PostgreSQL.
if [ -n "${GIT_COLLAB_TEST_POSTGRES:-}" ] && [ "$#" = 0 ]; then
    echo "== tests again on PostgreSQL"
    pg_suites=(
        access_hardening_test auth_binding_test events_test governance_test
        hostile_input_test issue_export_test issue_fleet_test issue_list_paging_test
        issue_server_cli_test issue_server_test lease_cli_test lease_concurrency_test
        lease_crash_test lease_fencing_test lease_policy_test lease_server_test
        limits_test release_test repo_admin_test review_cli_test review_verb_test
        ssh_access_test ssh_channel_requests_test ssh_git_test web_code_test
        web_http_test web_malformed_paths_test web_rendering_test webhooks_test
        work_queue_cli_test work_queue_test
    )
    GIT_COLLAB_TEST_BACKEND=postgres cargo nextest run --bins --locked --no-fail-fast \
        "${pg_suites[@]/#/--test=}" \
        -E '(binary(git-collab-server) and test(/^(db|hooks::fencing)::/)) or (not binary(git-collab-server) and not test(/^db::/))' ||
        status=$?
fi
exit "$status"
