#!/bin/bash
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ "$(id -un)" = builder ] || fail "verifier is $(id -un)"
[ "$(cat /app/built-by)" = builder ] || fail "RUN after USER ran as $(cat /app/built-by)"
[ "$(stat -c %U /app/out.txt)" = builder ] || fail "out.txt owned by $(stat -c %U /app/out.txt)"
[ "$HOME" = /home/builder ] || fail "HOME is $HOME"
echo 1 > /logs/verifier/reward.txt
