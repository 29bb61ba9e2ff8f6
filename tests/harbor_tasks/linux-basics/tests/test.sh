#!/bin/bash
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
for d in /tmp /var/tmp /dev/shm; do
    [ "$(stat -c %a "$d")" = 1777 ] || fail "$d is $(stat -c %a "$d")"
    setpriv --reuid=65534 --regid=65534 --clear-groups touch "$d/nobody" || fail "$d"
done
[ "$(id -u)" = 0 ] && [ "$HOME" = /root ] || fail "root's HOME is $HOME"
[ "$(cat /app/out.txt)" = ok ] || fail "no answer"
echo 1 > /logs/verifier/reward.txt
