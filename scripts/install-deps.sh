#!/usr/bin/env bash
# Installs the system packages the build and the tests need, on a fresh
# Debian 12 machine (as root). Idempotent: a second run installs nothing.
set -euo pipefail

packages=(git openssh-client openssh-server sqlite3 pkg-config chromium curl)
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
