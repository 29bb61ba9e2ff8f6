#!/bin/bash
# Verifier for jq-low-stock. Always writes /logs/verifier/reward.txt.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
script=/app/low_stock.sh
[[ -x $script ]] || { echo "missing or not executable: $script"; exit 0; }
check() {  # check LABEL EXPECTED_FILE ARGS...
  local label=$1 expected=$2; shift 2
  if ! diff <(timeout 20 "$script" "$@") "$expected"; then
    echo "FAIL: $label"; return 1
  fi
  echo "ok: $label"
}
ok=1
cp /tests/inventory.json /tmp/inventory.json
check "default file" /tests/expected.txt || ok=0
check "explicit file" /tests/expected.txt /tmp/inventory.json || ok=0
check "another file" /tests/other_expected.txt /tests/other.json || ok=0
[[ $ok == 1 ]] && echo 1 > /logs/verifier/reward.txt
