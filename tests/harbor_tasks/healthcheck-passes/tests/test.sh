#!/bin/bash
# The agent started only once the healthcheck had passed (on its third try).
if [ "$(cat /app/tries-when-the-agent-started)" = 3 ] && [ "$(cat /app/out.txt)" = ok ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
