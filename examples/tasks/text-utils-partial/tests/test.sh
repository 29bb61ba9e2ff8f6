#!/bin/bash
# Partial-credit verifier for text-utils-partial.
# Writes /logs/verifier/reward.json: {"reward": <fraction of functions passing>, ...}
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
export PYTHONDONTWRITEBYTECODE=1
timeout 50 python3 /tests/grade.py /app/textutils.py /logs/verifier/reward.json
if [ ! -s /logs/verifier/reward.json ]; then
  # grader crashed or timed out: still report a reward
  echo '{"reward": 0.0, "parse_ok": 0.0, "slugify": 0.0, "is_palindrome": 0.0, "word_frequencies": 0.0, "caesar": 0.0}' > /logs/verifier/reward.json
fi
cat /logs/verifier/reward.json
