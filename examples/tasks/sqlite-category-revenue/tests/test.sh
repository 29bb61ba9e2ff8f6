#!/bin/bash
# Verifier for sqlite-category-revenue. Always writes /logs/verifier/reward.txt.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
export PYTHONDONTWRITEBYTECODE=1
if timeout 50 python3 -m pytest -q -p no:cacheprovider -c /dev/null --rootdir=/tests /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
