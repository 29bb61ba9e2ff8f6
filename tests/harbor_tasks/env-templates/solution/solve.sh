#!/bin/bash
echo "$GREETING" > /app/out.txt
