#!/bin/bash
set -euo pipefail
cd /app
# Find the commit that changed subtract's body: the most recent commit touching the
# "return a - b" line - that is the one that removed it.
bad=$(git log -1 --format=%H -S'return a - b' -- calc.py)
echo "reverting $bad: $(git log -1 --format=%s "$bad")"
git -c user.name="sandlot solver" -c user.email=solver@example.com revert --no-edit "$bad"
PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider
git status --short
