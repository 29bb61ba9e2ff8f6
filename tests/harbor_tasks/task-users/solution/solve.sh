#!/bin/bash
set -e
{ id -un; echo "$HOME"; } > /app/answer.txt
touch "$HOME/agent-home-is-writable" /tmp/a /var/tmp/a /dev/shm/a
if touch /etc/agent-is-root 2>/dev/null; then echo "the agent is root" >> /app/answer.txt; fi
