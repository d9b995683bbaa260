#!/usr/bin/env bash
# Installs the system packages the build and the tests need, on a fresh
# Debian 12 machine (as root). Idempotent: a second run installs nothing.
set -euo pipefail

# python3 runs scripts/import-graph.py (collab-testkit's import-loop test);
# python3-paramiko is the SSH client that lies about its window in the
# advisory suite (tests/it/once/advisories.rs); tmux drives the terminal UI
# like a person (tests/it/both/tui.rs); python3-venv holds the MCP SDK below;
# openssl generates the CAs of the PostgreSQL TLS test (collab-store sql::tls).
packages=(git git-lfs openssh-client openssh-server sqlite3 pkg-config chromium curl python3 python3-paramiko tmux python3-venv openssl)
# PostgreSQL for the tests' throwaway cluster (scripts/ci-postgres.sh). Only
# root can install it; without it, and without root, those tests skip.
if [ "$(id -u)" = 0 ]; then
    packages+=(postgresql)
elif ! command -v pg_ctl >/dev/null && ! compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
    echo "install-deps: PostgreSQL is not installed (not root, so not installing it): its tests will skip"
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
# The official MCP Python SDK, the real client of the collab-mcp tests
# (crates/collab-server/tests/mcp/agent_loop.py), in a virtualenv outside
# the clone so every clone and CI run shares it.
mcp_venv="${GIT_COLLAB_MCP_VENV:-/var/cache/git-collab-ci/mcp-venv}"
if ! "$mcp_venv/bin/python" -c 'import mcp.client.stdio' 2>/dev/null; then
    echo "install-deps: installing the MCP Python SDK into $mcp_venv"
    mkdir -p "$(dirname "$mcp_venv")"
    python3 -m venv "$mcp_venv"
    "$mcp_venv/bin/pip" install -q --disable-pip-version-check 'mcp>=2.3,<3'
fi
