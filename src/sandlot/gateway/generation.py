"""Generation settings the job sets for every model request, whatever agent sends it.

`--temperature`, `--max-output-tokens`, `--reasoning-effort`, `--seed` and `--model-kwarg
KEY=VALUE` are written into each request body by the gateway, in the field the request's
wire format uses for them. **A flag given wins** over the agent's own value; a setting
not given leaves whatever the agent sent untouched. Each exchange records what it
changed (`generation` in llm_trajectory.jsonl: the agent's value and the one sent), and
each trial what its agent sent (result.json `generation`), so a comparison of two runs
can tell the model's behaviour from its settings.

A setting a wire format has no field for (a seed in Anthropic's Messages or OpenAI's
Responses API) is not sent, and is listed as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: --reasoning-effort values, and the thinking budget (tokens) each stands for where a
#: format takes a budget instead of a level (Anthropic, Google): LiteLLM's defaults.
THINKING_BUDGETS = {"none": 0, "minimal": 1024, "low": 1024, "medium": 2048, "high": 4096,
                    "xhigh": 8192}
REASONING_EFFORTS = tuple(THINKING_BUDGETS)
#: Keys that carry the conversation or the routing: never set by --model-kwarg.
PROTECTED_KEYS = frozenset({"model", "messages", "input", "contents", "system", "stream",
                            "tools", "instructions", "systemInstruction"})
#: Settings each wire format has no field for.
NOT_IN_FORMAT = {"messages": ("seed",), "responses": ("seed",)}


class GenerationError(ValueError):
    """A generation flag that cannot be used; the message says which and how to fix it."""


@dataclass(frozen=True)
class GenerationSettings:
    """The job's generation settings; None for one not given (the agent's value stays)."""

    temperature: float | None = None
    max_output_tokens: int | None = None
    reasoning_effort: str | None = None
    seed: int | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.temperature, self.max_output_tokens,
                                           self.reasoning_effort, self.seed)) \
            or bool(self.model_kwargs)

    def as_dict(self) -> dict[str, Any]:
        """The settings given (for config.json and result.json)."""
        out: dict[str, Any] = {k: v for k, v in (
            ("temperature", self.temperature), ("max_output_tokens", self.max_output_tokens),
            ("reasoning_effort", self.reasoning_effort), ("seed", self.seed)) if v is not None}
        if self.model_kwargs:
            out["model_kwargs"] = dict(self.model_kwargs)
        return out

    def not_sent(self, fmt: str) -> list[str]:
        return [name for name in NOT_IN_FORMAT.get(fmt, ()) if getattr(self, name) is not None]


def parse_model_kwargs(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; a VALUE that reads as JSON (0.9, true, {"a": 1}) is that value,
    anything else is the string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise GenerationError(f"--model-kwarg {pair!r}: use KEY=VALUE (e.g. top_p=0.9)")
        if key in PROTECTED_KEYS:
            raise GenerationError(f"--model-kwarg {key}: that key carries the conversation "
                                  "or the routing, not a generation setting")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def apply_generation(settings: GenerationSettings, fmt: str,
                     body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body to send, and what changed: {setting: {"agent": its value, "sent": ours}}."""
    if not settings:
        return body, {}
    body = dict(body)
    changes: dict[str, Any] = {}
    applier = _APPLIERS[fmt]
    applier(settings, body, changes)
    for key, value in settings.model_kwargs.items():
        _set(body, key, value, changes, f"model_kwargs.{key}")
    return body, changes


def agent_values(fmt: str, body: dict[str, Any]) -> dict[str, Any]:
    """The generation settings a request came with, by sandlot's names (absent: left out)."""
    if fmt == "gemini":
        config = body.get("generationConfig") or {}
        found = {"temperature": config.get("temperature"),
                 "max_output_tokens": config.get("maxOutputTokens"),
                 "reasoning": (config.get("thinkingConfig") or None), "seed": config.get("seed")}
    elif fmt == "messages":
        found = {"temperature": body.get("temperature"),
                 "max_output_tokens": body.get("max_tokens"),
                 "reasoning": body.get("thinking"), "seed": None}
    elif fmt == "responses":
        found = {"temperature": body.get("temperature"),
                 "max_output_tokens": body.get("max_output_tokens"),
                 "reasoning": (body.get("reasoning") or {}).get("effort")
                 if isinstance(body.get("reasoning"), dict) else None, "seed": None}
    else:
        found = {"temperature": body.get("temperature"),
                 "max_output_tokens": body.get("max_completion_tokens", body.get("max_tokens")),
                 "reasoning": body.get("reasoning_effort"), "seed": body.get("seed")}
    return {k: v for k, v in found.items() if v is not None}


def _set(target: dict[str, Any], key: str, value: Any, changes: dict[str, Any],
         name: str) -> None:
    old = target.get(key)
    if old != value:
        changes[name] = {"agent": old, "sent": value}
    target[key] = value


def _chat(s: GenerationSettings, body: dict[str, Any], changes: dict[str, Any]) -> None:
    if s.temperature is not None:
        _set(body, "temperature", s.temperature, changes, "temperature")
    if s.max_output_tokens is not None:
        # Newer OpenAI models take max_completion_tokens; set whichever the agent used.
        keys = [k for k in ("max_completion_tokens", "max_tokens") if k in body] or ["max_tokens"]
        for key in keys:
            _set(body, key, s.max_output_tokens, changes, key)
    if s.reasoning_effort is not None:
        _set(body, "reasoning_effort", s.reasoning_effort, changes, "reasoning_effort")
    if s.seed is not None:
        _set(body, "seed", s.seed, changes, "seed")


def _responses(s: GenerationSettings, body: dict[str, Any], changes: dict[str, Any]) -> None:
    if s.temperature is not None:
        _set(body, "temperature", s.temperature, changes, "temperature")
    if s.max_output_tokens is not None:
        _set(body, "max_output_tokens", s.max_output_tokens, changes, "max_output_tokens")
    if s.reasoning_effort is not None:
        reasoning = dict(body.get("reasoning") or {})
        _set(reasoning, "effort", s.reasoning_effort, changes, "reasoning.effort")
        body["reasoning"] = reasoning


def _messages(s: GenerationSettings, body: dict[str, Any], changes: dict[str, Any]) -> None:
    if s.temperature is not None:
        _set(body, "temperature", s.temperature, changes, "temperature")
    if s.max_output_tokens is not None:
        _set(body, "max_tokens", s.max_output_tokens, changes, "max_tokens")
    if s.reasoning_effort is not None:
        budget = THINKING_BUDGETS[s.reasoning_effort]
        thinking = ({"type": "disabled"} if budget == 0
                    else {"type": "enabled", "budget_tokens": budget})
        _set(body, "thinking", thinking, changes, "thinking")
        max_tokens = body.get("max_tokens")
        if budget and isinstance(max_tokens, int) and max_tokens <= budget:
            # Anthropic wants room for the answer beyond the thinking budget.
            _set(body, "max_tokens", budget + max_tokens, changes, "max_tokens")


def _gemini(s: GenerationSettings, body: dict[str, Any], changes: dict[str, Any]) -> None:
    config = dict(body.get("generationConfig") or {})
    if s.temperature is not None:
        _set(config, "temperature", s.temperature, changes, "generationConfig.temperature")
    if s.max_output_tokens is not None:
        _set(config, "maxOutputTokens", s.max_output_tokens, changes,
             "generationConfig.maxOutputTokens")
    if s.reasoning_effort is not None:
        _set(config, "thinkingConfig", {"thinkingBudget": THINKING_BUDGETS[s.reasoning_effort]},
             changes, "generationConfig.thinkingConfig")
    if s.seed is not None:
        _set(config, "seed", s.seed, changes, "generationConfig.seed")
    if config:
        body["generationConfig"] = config


_APPLIERS = {"chat": _chat, "responses": _responses, "messages": _messages, "gemini": _gemini}


@dataclass
class SentSettings:
    """What a trial's agent sent, by setting: each distinct value, in order (result.json)."""

    values: dict[str, list[Any]] = field(default_factory=dict)
    n_changed: int = 0

    def add(self, found: dict[str, Any], changed: bool) -> None:
        for key, value in found.items():
            seen = self.values.setdefault(key, [])
            if value not in seen and len(seen) < 10:
                seen.append(value)
        self.n_changed += changed
