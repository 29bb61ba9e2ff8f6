#!/bin/bash
mkdir -p /srv/site
echo served > /srv/site/answer.txt
nohup python3 -m http.server 8080 --bind 127.0.0.1 --directory /srv/site \
    > /tmp/server.log 2>&1 &
