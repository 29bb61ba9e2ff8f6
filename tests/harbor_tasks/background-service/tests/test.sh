#!/bin/bash
# Asks the server over bash's /dev/tcp (no curl in a minimal image).
got=
for _ in $(seq 100); do
    if exec 3<>/dev/tcp/127.0.0.1/8080; then
        printf 'GET /answer.txt HTTP/1.0\r\n\r\n' >&3
        got=$(tail -n 1 <&3 | tr -d '\r')
        exec 3<&-
        break
    fi 2>/dev/null
    sleep 0.1
done
echo "the server answered: $got"
[ "$got" = served ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
