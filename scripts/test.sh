#!/usr/bin/env bash
# The test command: sets up what the tests need on a fresh Debian 12 machine
# (system packages, podman and the container image under test) and runs the
# whole suite with cargo-nextest. Extra arguments go to nextest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

# The container tests boot the image built from this tree. Without a
# container engine they skip, unless GIT_COLLAB_REQUIRE_CONTAINER_TESTS=1.
if [ "$(id -u)" = 0 ] || [ -n "${DOCKER_HOST:-}" ]; then
    eval "$(bash scripts/ci-podman-setup.sh)"
    bash scripts/ci-build-image.sh
    trap 'bash scripts/ci-podman-setup.sh --stop >/dev/null 2>&1 || true' EXIT
fi

cargo nextest run --lib --bins --tests --locked --no-fail-fast "$@"
