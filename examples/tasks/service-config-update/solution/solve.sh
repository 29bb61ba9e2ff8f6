#!/bin/bash
set -euo pipefail
cfg=/app/config/service.ini
awk '
  /^[[:space:]]*\[/                                   { sec = $0 }
  sec == "[server]"        && /^port[[:space:]]*=/      { print "port = 9090"; next }
  sec == "[database]"      && /^pool_size[[:space:]]*=/ { print "pool_size = 20"; next }
  sec == "[database]"      && /^ssl[[:space:]]*=/       { print "ssl = true"; next }
  sec == "[logging]"       && /^level[[:space:]]*=/     { print "level = WARNING"; next }
  sec == "[cache]"         && /^enabled[[:space:]]*=/   { print "enabled = true"; print "ttl_seconds = 300"; next }
  sec == "[feature_flags]" && /^legacy_refunds[[:space:]]*=/ { next }
  { print }
' "$cfg" > "$cfg.new"
mv "$cfg.new" "$cfg"
