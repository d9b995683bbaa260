#!/usr/bin/env bash
# Prepare a Debian 12 machine (run as root) to build and run the git-collab
# container image without a Docker engine or an image registry:
#   1. install podman, runc and debootstrap;
#   2. write /etc/containers/containers.conf (runc, ulimits this machine allows);
#   3. start `podman system service` on /run/podman/podman.sock (Docker API);
#   4. build the base image docker.io/library/debian:bookworm-slim locally with
#      debootstrap, only when it is missing (kept between runs, ~2 min);
#   5. remove containers and volumes leaked by killed test runs.
# Idempotent: every step checks before it acts.
#
# Usage:
#   eval "$(scripts/ci-podman-setup.sh)"   # set up; stdout is `export DOCKER_HOST=...`
#   scripts/ci-podman-setup.sh --cleanup   # only remove leaked test containers/volumes
#   scripts/ci-podman-setup.sh --stop      # cleanup, then stop the API service we started
# Everything else goes to stderr, so stdout stays eval-able.
set -euo pipefail

SOCK=/run/podman/podman.sock
PIDFILE=/run/podman/git-collab-service.pid
SERVICE_LOG=/var/log/git-collab-podman-service.log
BASE_IMAGE=docker.io/library/debian:bookworm-slim
TC_LABEL=org.testcontainers.managed-by=testcontainers
# Named volumes made by tests/container_e2e.rs start with this.
E2E_VOLUME_PREFIX=git-collab-e2e-

log() { printf 'ci-podman-setup: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (rootful podman; the API socket is $SOCK)"

cleanup_leaks() {
    command -v podman >/dev/null || return 0
    local ids vols
    ids=$(podman ps -aq --filter "label=$TC_LABEL")
    if [ -n "$ids" ]; then
        log "removing leaked test containers: $(echo "$ids" | tr '\n' ' ')"
        # shellcheck disable=SC2086
        podman rm -f -t 0 $ids >/dev/null
    fi
    vols=$(podman volume ls -q --filter "name=^$E2E_VOLUME_PREFIX")
    if [ -n "$vols" ]; then
        log "removing leaked test volumes: $(echo "$vols" | tr '\n' ' ')"
        # shellcheck disable=SC2086
        podman volume rm -f $vols >/dev/null
    fi
}

service_answers() {
    [ -S "$SOCK" ] && podman --url "unix://$SOCK" version >/dev/null 2>&1
}

stop_service() {
    if [ -f "$PIDFILE" ]; then
        local pid
        pid=$(cat "$PIDFILE")
        # Only the process this script started, checked by its command line.
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'system service'; then
            log "stopping podman API service (pid $pid)"
            kill "$pid"
        fi
        rm -f "$PIDFILE"
    fi
}

case "${1:-}" in
    --cleanup) cleanup_leaks; exit 0 ;;
    --stop) cleanup_leaks; stop_service; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1 (expected --cleanup or --stop)" ;;
esac

# 1. Packages. crun (podman's default runtime) fails on this machine's hybrid
# cgroups; runc works.
PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >&2
fi

# 2. Engine configuration. Podman's default ulimits exceed this machine's hard
# limits (setrlimit fails in every container), so ask for what is allowed.
CONF=/etc/containers/containers.conf
want_conf='# Written by scripts/ci-podman-setup.sh (git-collab CI).
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"'
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$want_conf" ]; then
    if [ -f "$CONF" ]; then
        cp "$CONF" "$CONF.bak.$(date +%s)"
        log "replaced $CONF (old copy kept next to it)"
    fi
    mkdir -p /etc/containers
    printf '%s\n' "$want_conf" >"$CONF"
fi

# 3. Docker-compatible API for testcontainers and the docker CLI.
# A service we started whose working directory is gone (a CI clone deleted
# under it) still answers pings but cannot start containers (conmon: "Failed
# to get working directory"): replace it.
if [ -f "$PIDFILE" ] && [[ "$(readlink "/proc/$(cat "$PIDFILE")/cwd" 2>/dev/null)" == *"(deleted)" ]]; then
    log "restarting the podman API service: its working directory was deleted"
    stop_service
    sleep 1
    rm -f "$SOCK"
fi
if ! service_answers; then
    mkdir -p "$(dirname "$SOCK")"
    rm -f "$SOCK"
    log "starting podman system service on $SOCK (log: $SERVICE_LOG)"
    # From /, so that deleting the clone we were run from cannot break it.
    (cd / && exec setsid podman system service --time=0 "unix://$SOCK" >>"$SERVICE_LOG" 2>&1 </dev/null) &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 100); do
        service_answers && break
        sleep 0.1
    done
    service_answers || die "podman API service did not answer on $SOCK; see $SERVICE_LOG"
fi

# 4. Base image, built from the Debian mirror this machine already uses (no
# registry is reachable). Made to look like the official slim image: no git,
# no docs or translations, deb822 sources.
if podman image exists "$BASE_IMAGE"; then
    log "base image $BASE_IMAGE present (kept from an earlier run)"
else
    MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
    ROOTFS=$(mktemp -d /var/tmp/git-collab-rootfs.XXXXXX)
    trap 'rm -rf "$ROOTFS"' EXIT
    log "building $BASE_IMAGE with debootstrap from $MIRROR (about 2 minutes)"
    debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >&2
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        cp /etc/apt/sources.list.d/debian.sources "$ROOTFS/etc/apt/sources.list.d/debian.sources"
        rm -f "$ROOTFS/etc/apt/sources.list"
    fi
    chroot "$ROOTFS" apt-get clean
    # The official slim image keeps dpkg from installing docs, man pages and
    # translations (debuerreotype's slimify list); do the same, for packages
    # installed later too.
    cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
SLIM
    find "$ROOTFS/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$ROOTFS/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$ROOTFS"/usr/share/groff/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/linda/* \
        "$ROOTFS"/usr/share/lintian/overrides/* "$ROOTFS"/usr/share/locale/* "$ROOTFS"/usr/share/man/* \
        "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
        "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/* "$ROOTFS"/tmp/*
    tar --numeric-owner -C "$ROOTFS" -c . |
        podman import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["bash"]' \
            - "$BASE_IMAGE" >&2
    rm -rf "$ROOTFS"
    trap - EXIT
    log "built $BASE_IMAGE ($(podman image inspect --format '{{.Size}}' "$BASE_IMAGE") bytes)"
fi

# 5. Leftovers of killed test runs (testcontainers-rs has no reaper).
cleanup_leaks

log "ready; podman $(podman version --format '{{.Client.Version}}'), API on $SOCK"
echo "export DOCKER_HOST=unix://$SOCK"
