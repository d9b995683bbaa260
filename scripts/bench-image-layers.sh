#!/usr/bin/env bash
# Compare the container image layer by layer between the Dockerfile of an
# earlier commit ("before") and the working tree ("after"), both built with
# `--target prebuilt` around the same release binary, so only the runtime
# stage differs. Prints a Markdown section for docs/benchmarks.md on stdout.
#
# Usage: scripts/bench-image-layers.sh BEFORE_REV [BINARY]   (needs python3 for the JSON)
#   BINARY defaults to target/release/git-collab-server (CARGO_TARGET_DIR
#   respected); needs podman and the local base image
#   (scripts/ci-podman-setup.sh).
set -euo pipefail

before_rev=${1:?usage: scripts/bench-image-layers.sh BEFORE_REV [BINARY]}
cd "$(dirname "$0")/.."
binary=${2:-${CARGO_TARGET_DIR:-target}/release/git-collab-server}
[ -x "$binary" ] || { echo "error: no binary at $binary" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/context"
cp "$binary" "$work/context/git-collab-server"
git show "$before_rev:docker/Dockerfile" > "$work/Dockerfile.before"

build() { # tag dockerfile
    podman build -q --format docker --target prebuilt -f "$2" -t "$1" "$work/context" >/dev/null
}
build localhost/git-collab:layers-before "$work/Dockerfile.before"
build localhost/git-collab:layers-after docker/Dockerfile

mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
layers() { # tag: one table row per layer with a size, oldest first
    podman history --format json "$1" | python3 -c '
import json, sys
for layer in reversed(json.load(sys.stdin)):
    if layer["size"] > 0:
        by = " ".join(layer["CreatedBy"].replace("/bin/sh -c #(nop) ", "").replace("/bin/sh -c ", "").split())
        by = by if len(by) <= 90 else by[:87] + "..."
        print("| %.1f MB | `%s` |" % (layer["size"] / 1e6, by.replace("|", "\\|")))
'
}
total() { mb "$(podman image inspect --format '{{.Size}}' "$1")"; }

cat <<MD
## Container image layers

Measured by \`scripts/bench-image-layers.sh $before_rev\` on $(date -u +%F), podman
$(podman version --format '{{.Client.Version}}'), both images built with \`--target prebuilt\`
around the same release binary ($(mb "$(stat -c %s "$binary")")); only the runtime stage differs.

**Before** (Dockerfile of $before_rev, \`debian:bookworm-slim\` + \`apt-get install git ca-certificates tini\`): $(total localhost/git-collab:layers-before)

| layer size | created by |
|---|---|
$(layers localhost/git-collab:layers-before)

**After** (working tree, \`FROM scratch\` + a root filesystem gathered from the same Debian packages): $(total localhost/git-collab:layers-after)

| layer size | created by |
|---|---|
$(layers localhost/git-collab:layers-after)

MD
