#!/bin/bash
echo hi > /app/out.txt
