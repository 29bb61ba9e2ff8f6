#!/bin/bash
cat /tmp/entrypoint.txt
first=$(cat /tmp/heartbeat); sleep 0.5; second=$(cat /tmp/heartbeat)
echo "heartbeat: $first -> $second"
if grep -q "entrypoint ran as worker with: /bin/sh -c" /tmp/entrypoint.txt \
    && [ -n "$first" ] && [ "$first" != "$second" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
