#!/bin/bash
cp /var/tmp/tries /app/tries-when-the-agent-started
echo ok > /app/out.txt
