#!/bin/bash
mkdir -p /logs/agent/notes
echo "solved it" > /logs/agent/notes/summary.txt
ln -s /etc/passwd /logs/agent/notes/link
echo done > /app/out.txt
