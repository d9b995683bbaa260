#!/usr/bin/env bash
# Build the container image for CI: the release binary is compiled on the host
# (no Rust image can be pulled here) and copied into the Dockerfile's
# `runtime` stage through the `prebuilt` target, the same stage users get
# from the default `release` target.
#
# Usage: scripts/ci-build-image.sh [IMAGE]   (default localhost/git-collab:test)
# Needs podman and the local base image: run scripts/ci-podman-setup.sh first.
# CARGO_TARGET_DIR (and build.target-dir) are respected.
set -euo pipefail

IMAGE=${1:-${GIT_COLLAB_IMAGE:-localhost/git-collab:test}}
BASE_IMAGE=docker.io/library/debian:bookworm-slim
cd "$(dirname "$0")/.."

log() { printf 'ci-build-image: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

command -v podman >/dev/null || die "podman not found; run scripts/ci-podman-setup.sh"
podman image exists "$BASE_IMAGE" ||
    log "warning: $BASE_IMAGE is not present locally; podman will try a registry (scripts/ci-podman-setup.sh builds it offline)"

log "cargo build --release --locked --bin git-collab-server"
cargo build --release --locked --bin git-collab-server

# Where cargo put it, whatever CARGO_TARGET_DIR or .cargo/config.toml say.
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
binary="$target_dir/release/git-collab-server"
[ -x "$binary" ] || die "no binary at $binary after cargo build"

# A build context holding only the binary: the runtime stage needs nothing else.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/git-collab-server"

# The commit the binary came from, so a stale image can be recognised.
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"

log "podman build --target prebuilt -t $IMAGE"
podman build --format docker --target prebuilt -f docker/Dockerfile -t "$IMAGE" "$context" >&2
# A separate step with the value spelled out: podman 4.3's layer cache ignores
# build-arg values and --label, and would keep a stale revision.
printf 'FROM %s\nLABEL org.opencontainers.image.revision="%s"\n' "$IMAGE" "$revision" |
    podman build --format docker -t "$IMAGE" -f - "$context" >/dev/null

size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
log "built $IMAGE: $((size / 1000 / 1000)) MB ($size bytes; binary $(stat -c %s "$binary") bytes)"
