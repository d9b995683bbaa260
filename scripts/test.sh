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

# A test that cannot run here says why and passes; each run's JUnit report
# (.config/nextest.toml) keeps that line, and the run closes with how many
# passed only by skipping, and why.
# nextest keeps its store under the workspace's target/nextest (its
# default `store.dir`), whatever CARGO_TARGET_DIR says.
junit() { echo "target/nextest/$1/junit.xml"; }
say_skipped() { python3 scripts/skipped-tests.py "$(junit "$1")" "$2" || true; }

status=0
# --workspace builds every binary before any test runs: the server's tests
# drive the `git-collab` CLI and find it beside themselves (collab_testkit::bin).
cargo nextest run --workspace --locked --no-fail-fast "$@" || status=$?
say_skipped default ""

# The same suites once more with the collab database on PostgreSQL
# (GIT_COLLAB_TEST_BACKEND=postgres: each server and each database unit test
# gets a fresh database). Which suites: the `postgres` profile in
# .config/nextest.toml, by where a suite lives (the server's `both::`
# suites, the store's unit tests), not by a list here.
if [ -n "${GIT_COLLAB_TEST_POSTGRES:-}" ] && [ "$#" = 0 ]; then
    echo "== tests again on PostgreSQL"
    GIT_COLLAB_TEST_BACKEND=postgres cargo nextest run --workspace --locked --no-fail-fast \
        --profile postgres || status=$?
    say_skipped postgres "on PostgreSQL"
fi
exit "$status"
