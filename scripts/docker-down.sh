#!/usr/bin/env bash
# Stop the dockerd started by scripts/docker-up.sh (identified by its pidfile); leaves other engines alone.
set -u
PIDFILE=${SSRKIT_DOCKERD_PIDFILE:-/var/run/ssrkit-dockerd.pid}
say() { echo "docker-down: $*" >&2; }

if [ ! -f "$PIDFILE" ]; then
    say "no $PIDFILE: no engine started by docker-up.sh"
    exit 0
fi
pid=$(cat "$PIDFILE" 2>/dev/null)
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    say "dockerd (pid ${pid:-?}) is not running"
    rm -f "$PIDFILE"
    exit 0
fi
# ssrkit sandbox containers still present are removed first (they are disposable by design)
if command -v docker >/dev/null 2>&1; then
    ids=$(timeout 20 docker ps -aq --filter label=ssrkit.sandbox=1 2>/dev/null)
    [ -n "$ids" ] && timeout 60 docker rm -f $ids >/dev/null 2>&1
fi
kill -TERM "$pid"
for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { say "dockerd stopped"; rm -f "$PIDFILE"; exit 0; }
    sleep 0.25
done
say "dockerd did not stop in 30s; killing it"
kill -KILL "$pid" 2>/dev/null
rm -f "$PIDFILE"
exit 0
