#!/usr/bin/env bash
# Start a Docker engine for ssrkit's docker backend and tests, if none is reachable.
#
#   scripts/docker-up.sh            # install docker.io if missing, start dockerd, wait for the socket
#   scripts/docker-down.sh          # stop the dockerd this script started (and only that one)
#
# dockerd always runs with --iptables=false --bridge=none: sandboxes use no network (network_mode=none),
# and the engine must not touch the host's firewall or create bridges. Extra dockerd flags can be passed
# in SSRKIT_DOCKERD_ARGS (e.g. "--storage-driver=vfs" where overlayfs is unavailable).
# Exit status: 0 when an engine answers, 1 when none could be started (the reason is printed).
set -u

PIDFILE=${SSRKIT_DOCKERD_PIDFILE:-/var/run/ssrkit-dockerd.pid}
LOG=${SSRKIT_DOCKERD_LOG:-/var/log/ssrkit-dockerd.log}
SOCK=/var/run/docker.sock
WAIT=${SSRKIT_DOCKERD_WAIT:-60}

say() { echo "docker-up: $*" >&2; }

engine_ok() {
    command -v docker >/dev/null 2>&1 || return 1
    timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

if engine_ok; then
    say "a Docker engine is already running ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then say "dockerd is not installed and we are not root"; exit 1; fi
    say "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q docker.io >/dev/null 2>&1; then
        apt-get update -q >/dev/null 2>&1
        apt-get install -y -q docker.io >/dev/null 2>&1 || { say "apt-get install docker.io failed"; exit 1; }
    fi
fi

if [ "$(id -u)" != 0 ]; then say "starting dockerd needs root"; exit 1; fi

# a dockerd that runs but does not answer (yet): wait for it instead of starting a second one
if pgrep -x dockerd >/dev/null 2>&1; then
    say "dockerd is running but not answering yet; waiting up to ${WAIT}s"
else
    rm -f "$SOCK"
    mkdir -p "$(dirname "$LOG")" "$(dirname "$PIDFILE")"
    # setsid: the engine must not die with this shell or receive its terminal's Ctrl-C
    # shellcheck disable=SC2086
    setsid dockerd --iptables=false --bridge=none --pidfile="$PIDFILE" ${SSRKIT_DOCKERD_ARGS:-} \
        >>"$LOG" 2>&1 < /dev/null &
    say "started dockerd (pid $!, log $LOG)"
fi

for i in $(seq 1 $((WAIT * 4))); do
    if [ -S "$SOCK" ] && engine_ok; then
        say "engine ready after $((i / 4))s"
        exit 0
    fi
    # give up early when no dockerd is left (checked after 2s: the process may still be starting)
    if [ "$i" -gt 8 ] && ! pgrep -x dockerd >/dev/null 2>&1; then
        break
    fi
    sleep 0.25
done
say "the Docker engine did not come up; last lines of $LOG:"
tail -n 15 "$LOG" >&2 2>/dev/null
exit 1
