#!/usr/bin/env bash
# The test command: sets up what the tests need on a fresh Debian 12 machine
# (system packages, podman and the container image, Nix linters) and runs the
# whole suite with cargo-nextest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cargo nextest run --all-targets --locked --no-fail-fast "$@"
