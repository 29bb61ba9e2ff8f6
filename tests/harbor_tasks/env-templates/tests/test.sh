#!/bin/bash
if [ "$(cat /app/out.txt)" = "hello from the default" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
