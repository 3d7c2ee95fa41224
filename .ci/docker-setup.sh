#!/usr/bin/env bash
# Bring up a Docker engine and the local test image the executor tests use.
# Idempotent: every step checks before acting, so CI and developers can rerun it.
# Runs as root without stdin; no image registry is reachable, so nothing is pulled.
set -euo pipefail

IMAGE="dms-test/busybox:latest"
DOCKERD_LOG="/tmp/dockerd.log"
WAIT_SECONDS="${DOCKER_WAIT_SECONDS:-60}"
# Applets the tests call; each becomes a symlink to the one static busybox binary.
APPLETS=(sh echo sleep cat head dd yes true false)

export DEBIAN_FRONTEND=noninteractive

log() { printf '[docker-setup] %s\n' "$*"; }
die() { printf '[docker-setup] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages and starts dockerd)"

install_packages() {
  local missing=()
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    missing+=(docker.io)
  fi
  [ -x /bin/busybox ] || missing+=(busybox-static)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

start_dockerd() {
  if docker info >/dev/null 2>&1; then
    log "docker engine already running"
    return
  fi
  install_packages
  # A live pid file means a dockerd is still coming up: wait for it rather than start a
  # second one. A stale one (unclean exit) would stop the new dockerd from starting.
  if [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    log "dockerd already starting"
  else
    rm -f /var/run/docker.pid
    log "starting dockerd (log: $DOCKERD_LOG)"
    nohup dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  local waited=0
  until docker info >/dev/null 2>&1; do
    if [ "$waited" -ge "$WAIT_SECONDS" ]; then
      tail -n 20 "$DOCKERD_LOG" >&2 || true
      die "docker engine not ready after ${WAIT_SECONDS}s; see $DOCKERD_LOG"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  log "docker engine ready after ${waited}s"
}

build_test_image() {
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE already present"
    return
  fi
  [ -x /bin/busybox ] || install_packages
  ROOTFS="$(mktemp -d)"
  trap 'rm -rf "$ROOTFS"' EXIT
  mkdir -p "$ROOTFS/bin" "$ROOTFS/tmp"
  chmod 1777 "$ROOTFS/tmp"
  cp /bin/busybox "$ROOTFS/bin/busybox"
  local applet
  for applet in "${APPLETS[@]}"; do
    ln -s busybox "$ROOTFS/bin/$applet"
  done
  log "importing $IMAGE"
  tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/bin' \
    --change 'CMD ["/bin/sh"]' \
    - "$IMAGE" >/dev/null
  log "image $IMAGE built"
}

start_dockerd
build_test_image
