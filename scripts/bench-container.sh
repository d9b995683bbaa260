#!/usr/bin/env bash
# Measure the container image: its size, and cold start time, from
# `podman run` to GET /readyz answering 200 on the published HTTP port.
# Two cases per round: a first boot on a fresh volume (host key generated,
# collab.db created) and a restart on that volume (state already there).
#
# Usage: scripts/bench-container.sh [IMAGE] [ROUNDS]
#        (default localhost/git-collab:test, 5 rounds)
# ENGINE=docker to use the docker CLI instead of podman. Prints a Markdown
# section for docs/benchmarks.md on stdout; progress goes to stderr.
set -euo pipefail

IMAGE=${1:-localhost/git-collab:test}
ROUNDS=${2:-5}
ENGINE=${ENGINE:-podman}
DEADLINE_S=120

log() { printf 'bench-container: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

command -v "$ENGINE" >/dev/null || die "$ENGINE not found"
command -v curl >/dev/null || die "curl not found"
"$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE not found; run scripts/ci-build-image.sh"

work=$(mktemp -d)
container=""
volume=""
cleanup() {
    if [ -n "$container" ]; then "$ENGINE" rm -f -t 0 "$container" >/dev/null 2>&1 || true; fi
    if [ -n "$volume" ]; then "$ENGINE" volume rm -f "$volume" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

ssh-keygen -q -t ed25519 -N '' -C bench -f "$work/key"
admin_key=$(cat "$work/key.pub")

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Starts a container on $volume; sets $container and $elapsed_ms (from
# `run` to /readyz answering 200).
boot() {
    local start port
    start=$(now_ms)
    # Podman without systemd complains that it cannot schedule health checks;
    # keep stderr for when the run itself fails.
    if ! container=$("$ENGINE" run -d --read-only --tmpfs /tmp \
        -p 127.0.0.1::8080 -p 127.0.0.1::2222 \
        -v "$volume:/var/lib/git-collab" \
        -e GIT_COLLAB_INITIAL_ADMIN_KEYS="$admin_key" \
        "$IMAGE" 2>"$work/run.err"); then
        cat "$work/run.err" >&2
        die "$ENGINE run failed"
    fi
    port=$("$ENGINE" port "$container" 8080/tcp | head -n1 | sed 's/.*://')
    until curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null; do
        if [ $(( $(now_ms) - start )) -gt $(( DEADLINE_S * 1000 )) ]; then
            "$ENGINE" logs "$container" >&2 || true
            die "no /readyz within ${DEADLINE_S}s"
        fi
        sleep 0.02
    done
    elapsed_ms=$(( $(now_ms) - start ))
}

stop_container() {
    if ! { "$ENGINE" stop -t 30 "$container" && "$ENGINE" rm "$container"; } >/dev/null 2>"$work/stop.err"; then
        cat "$work/stop.err" >&2
        die "stopping $container failed"
    fi
    container=""
}

# min / median / max of the arguments.
summary() {
    printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "%d / %d / %d", a[1], a[int((NR+1)/2)], a[NR]}'
}

# median of the arguments.
median() {
    printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

BASE_IMAGE=docker.io/library/debian:bookworm-slim
first=()
again=()
stop=()
baseline=()
for round in $(seq 1 "$ROUNDS"); do
    # Baseline, same run: the engine's own cost to start and finish a
    # container of the base image that does nothing.
    t=$(now_ms); "$ENGINE" run --rm --read-only "$BASE_IMAGE" true >/dev/null 2>&1 || die "baseline run failed"
    baseline+=($(( $(now_ms) - t )))
    volume="git-collab-bench-$$-$round"
    boot; first+=("$elapsed_ms")
    t=$(now_ms); stop_container; stop+=($(( $(now_ms) - t )))
    boot; again+=("$elapsed_ms")
    stop_container
    "$ENGINE" volume rm -f "$volume" >/dev/null
    volume=""
    log "round $round: first boot ${first[-1]} ms, restart ${again[-1]} ms, SIGTERM stop ${stop[-1]} ms"
done

size=$("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE")
binary_size=$("$ENGINE" run --rm --entrypoint stat "$IMAGE" -c %s /usr/local/bin/git-collab-server 2>/dev/null)
[ -n "$binary_size" ] || binary_size=0
engine_version=$("$ENGINE" version --format '{{.Client.Version}}' 2>/dev/null || echo '?')

cat <<MD
## Container image

Measured by \`scripts/bench-container.sh\` on $(date -u +%Y-%m-%d), $ENGINE $engine_version,
$(nproc) CPU cores shared with other jobs, image \`$IMAGE\`
(\`--read-only\`, tmpfs /tmp, named volume, ports on 127.0.0.1). Start time is
from \`$ENGINE run\` to the first \`GET /readyz\` answering 200, polled every 20 ms.

| what | value |
|---|---|
| image size | $((size / 1000000)) MB (server binary $((binary_size / 1000000)) MB; the rest is git, busybox, tini and their libraries, see "Container image layers") |
| first boot on a fresh volume, ms (min / median / max of $ROUNDS) | $(summary "${first[@]}") |
| restart on an existing volume, ms (min / median / max) | $(summary "${again[@]}") |
| stop with SIGTERM, ms (min / median / max) | $(summary "${stop[@]}") |
| baseline: \`$ENGINE run --rm $BASE_IMAGE true\`, ms (min / median / max) | $(summary "${baseline[@]}") |
| first boot to /readyz vs baseline (medians) | $(awk -v a="$(median "${first[@]}")" -v b="$(median "${baseline[@]}")" 'BEGIN {printf "%.2fx", a / b}') |
MD
