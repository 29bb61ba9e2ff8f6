#!/bin/bash
set -euo pipefail
cat > /app/textutils.py <<'PY'
"""Small text helpers."""
import re
import string


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def is_palindrome(text: str) -> bool:
    chars = [c.lower() for c in text if c.isalnum()]
    return chars == chars[::-1]


def word_frequencies(text: str) -> dict:
    counts = {}
    for raw in re.findall(r"[a-z0-9']+", text.lower()):
        word = raw.strip("'")
        if word:
            counts[word] = counts.get(word, 0) + 1
    return counts


def caesar(text: str, shift: int) -> str:
    k = shift % 26
    lo, up = string.ascii_lowercase, string.ascii_uppercase
    table = str.maketrans(lo + up, lo[k:] + lo[:k] + up[k:] + up[:k])
    return text.translate(table)
PY
