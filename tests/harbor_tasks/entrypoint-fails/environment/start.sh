#!/bin/sh
echo "start.sh: the database is not configured" >&2
exit 3
