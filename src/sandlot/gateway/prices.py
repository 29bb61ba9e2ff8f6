"""Cost in USD from LiteLLM's bundled price map, read as JSON: offline, no litellm import."""

from __future__ import annotations

import importlib.util
import json
from functools import cached_property
from pathlib import Path
from typing import Any

from sandlot.gateway.formats.base import Usage

PRICE_FILE = "model_prices_and_context_window_backup.json"


def _bundled_price_file() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / PRICE_FILE
        if path.is_file():
            return path
    return None


class PriceTable:
    """Per-token prices by model name; unknown models cost None (not a guessed 0)."""

    def __init__(self, path: Path | None = None, extra: dict[str, dict[str, Any]] | None = None):
        self._path = path
        self._extra = extra or {}

    @cached_property
    def _table(self) -> dict[str, dict[str, Any]]:
        path = self._path or _bundled_price_file()
        table: dict[str, dict[str, Any]] = {}
        if path is not None:
            try:
                table = json.loads(path.read_text())
            except (OSError, ValueError):
                table = {}
        return {**table, **self._extra}

    def entry(self, model: str) -> dict[str, Any] | None:
        table = self._table
        provider, _, bare = model.partition("/")
        for key in (model, bare, f"{provider}/{bare}", bare.rsplit("/", 1)[-1]):
            if key and isinstance(table.get(key), dict) and "input_cost_per_token" in table[key]:
                return table[key]
        return None

    def cost(self, model: str, usage: Usage) -> float | None:
        entry = self.entry(model)
        if entry is None:
            return None
        price_in = float(entry.get("input_cost_per_token") or 0.0)
        price_out = float(entry.get("output_cost_per_token") or 0.0)
        price_read = float(entry.get("cache_read_input_token_cost") or price_in)
        price_write = float(entry.get("cache_creation_input_token_cost") or price_in)
        uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        return (uncached * price_in + usage.cache_read_tokens * price_read
                + usage.cache_write_tokens * price_write + usage.output_tokens * price_out)
