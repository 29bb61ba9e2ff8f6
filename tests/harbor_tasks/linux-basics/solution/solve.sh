#!/bin/bash
echo ok > /app/out.txt
