#!/bin/sh
# A service in the background, then the container's command, as entrypoint scripts do.
echo "entrypoint ran as $(id -un) with: $*" > /tmp/entrypoint.txt
( while :; do date +%s%N > /tmp/heartbeat; sleep 0.1; done ) &
exec "$@"
