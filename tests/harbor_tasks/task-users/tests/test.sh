#!/bin/bash
# Runs as uid 1001: the reward folder is its own, the agent's files are the agent's.
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ "$(id -u)" = 1001 ] || fail "verifier uid is $(id -u)"
[ "$(id -un)" = user1001 ] || fail "uid 1001 has no passwd entry"
[ "$(sed -n 1p /app/answer.txt)" = agent ] || fail "agent ran as $(sed -n 1p /app/answer.txt)"
[ "$(sed -n 2p /app/answer.txt)" = /home/agent ] || fail "agent HOME $(sed -n 2p /app/answer.txt)"
[ "$(wc -l < /app/answer.txt)" = 2 ] || fail "$(cat /app/answer.txt)"
[ "$(stat -c %U /app/answer.txt)" = agent ] || fail "answer owned by $(stat -c %U /app/answer.txt)"
[ -e /home/agent/agent-home-is-writable ] || fail "agent home"
[ "$HOME" = /home/user1001 ] || fail "verifier HOME $HOME"
touch /tmp/v /var/tmp/v /dev/shm/v || fail "temp folders not writable"
echo 1 > /logs/verifier/reward.txt
