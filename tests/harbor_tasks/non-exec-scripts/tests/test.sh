#!/bin/bash
if [ "$(cat /app/out.txt)" = done ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
