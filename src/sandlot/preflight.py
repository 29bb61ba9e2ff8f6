"""The model check made before any sandbox starts: is the credential set, and does the
provider answer one small request for this model?

Without it, a missing key or a misspelt model name surfaces only as every trial's agent
giving up, one timeout at a time, and the job reports a pass rate of 0 as if the model
had tried. One request up front turns that into one line and no trial folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sandlot.gateway.faults import classify, describe
from sandlot.gateway.formats import FORMATS
from sandlot.gateway.routing import RouteConfig, Router, key_env
from sandlot.gateway.upstream import PASSTHROUGH, CallContext, LiteLLMUpstream

PROBE_TIMEOUT_SEC = 60.0
#: An outage at the very start gets one more try before it fails the preflight.
UNAVAILABLE_RETRY_SEC = 2.0
PROBE_PROMPT = "Reply with the single word OK."
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "gemini": "/v1beta"}


@dataclass
class ModelCheck:
    """What the check found: `problems` stop the run; `notes` are said and the run goes on."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def missing_credentials(config: RouteConfig) -> list[str]:
    """One line per credential the route needs and the environment lacks.

    A pass-through provider at its public address needs its key; at a custom --api-base
    (a local vLLM, a proxy) a key is optional, unless --api-key-env names one. Other
    providers are asked of LiteLLM, which knows each one's variables.
    """
    provider = config.model.partition("/")[0]
    if provider == "scripted":
        return []
    if config.api_key_env:
        if os.environ.get(config.api_key_env):
            return []
        return [f"{config.api_key_env} is not set (needed by {config.model}; named by "
                "--api-key-env)"]
    route = PASSTHROUGH.get(provider)
    if route is not None:
        env = route[1]
        if config.api_base is None and env and not os.environ.get(env):
            return [f"{env} is not set (needed by {config.model})"]
        return []
    litellm = LiteLLMUpstream._litellm()
    try:
        litellm.get_llm_provider(config.model)
    except Exception:
        return [f"LiteLLM knows no provider {provider!r} (in --model {config.model}): use one "
                "of its provider prefixes (openai/, anthropic/, groq/, bedrock/, ...)"]
    with _empty_variables_unset():
        found = litellm.validate_environment(model=config.model)
    missing = [name for name in found.get("missing_keys") or []
               if not (config.api_base and name.endswith(("_API_BASE", "_BASE_URL")))]
    return [f"{name} is not set (needed by {config.model})" for name in missing]


@contextlib.contextmanager
def _empty_variables_unset() -> Iterator[None]:
    """LiteLLM counts a variable set to "" as set; a provider would not accept it as a key."""
    empty = {name: value for name, value in os.environ.items() if not value}
    for name in empty:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(empty)


def probe_body(fmt_name: str, provider: str, model_id: str) -> dict[str, Any]:
    """The smallest request each wire format accepts: one short user message."""
    if fmt_name == "messages":
        return {"model": model_id, "max_tokens": 16,
                "messages": [{"role": "user", "content": PROBE_PROMPT}]}
    if fmt_name == "gemini":
        return {"model": model_id, "contents": [{"role": "user",
                                                 "parts": [{"text": PROBE_PROMPT}]}],
                "generationConfig": {"maxOutputTokens": 16}}
    # OpenAI's reasoning models refuse max_tokens; other chat servers may not know the new name.
    limit = "max_completion_tokens" if provider == "openai" else "max_tokens"
    return {"model": model_id, "messages": [{"role": "user", "content": PROBE_PROMPT}],
            limit: 16}


def _error_text(error: str | None) -> str:
    """The provider's own message from an error body, short enough for one line."""
    if not error:
        return ""
    try:
        parsed = json.loads(error)
    except ValueError:
        return " ".join(error.split())[:200]
    inner = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    message = inner.get("message") if isinstance(inner, dict) else None
    return " ".join(str(message or inner).split())[:200]


async def probe_model(config: RouteConfig, timeout_sec: float = PROBE_TIMEOUT_SEC) -> ModelCheck:
    """One real request for the model, through the same upstream the gateway will use."""
    router = Router(config)
    provider, model_id = router.provider, router.model_id
    route = PASSTHROUGH.get(provider)
    fmt_name = route[2][0] if route else "chat"
    fmt = FORMATS[fmt_name]
    body = probe_body(fmt_name, provider, model_id)
    ctx = CallContext(trial="preflight", task=None, model=config.model)
    check = ModelCheck()
    try:
        for try_number in (1, 2):
            started = time.monotonic()
            try:
                async with asyncio.timeout(timeout_sec):
                    reply = await router.upstream(fmt_name).send(
                        fmt, PATHS[fmt_name], body, {}, ctx)
                    await reply.aclose()
            except TimeoutError:
                check.problems.append(f"the provider did not answer for {config.model} within "
                                      f"{timeout_sec:.0f} s (--no-preflight skips this check)")
                return check
            fault = classify(reply.status, reply.error or "")
            said = _error_text(reply.error)
            detail = f" ({said})" if said else ""
            if fault is None:
                check.notes.append(f"preflight: {config.model} answered in "
                                   f"{time.monotonic() - started:.1f} s")
            elif fault == "unavailable" and try_number == 1:
                await asyncio.sleep(UNAVAILABLE_RETRY_SEC)
                continue
            elif fault in ("auth", "unknown_model", "unavailable"):
                where = f" at {config.api_base}" if config.api_base else ""
                if (reply.error or "").startswith("cannot reach"):
                    check.problems.append(f"cannot reach the provider for {config.model}"
                                          f"{where}: {reply.error}")
                    return check
                check.problems.append(describe(fault, reply.status, config.model,
                                               key_env(config)) + where + detail)
            else:
                check.notes.append(f"preflight: {describe(fault, reply.status, config.model, None)}"
                                   f"{detail}; going ahead")
            return check
    finally:
        await router.aclose()
    return check


async def check_model(config: RouteConfig,
                      timeout_sec: float = PROBE_TIMEOUT_SEC) -> ModelCheck:
    """Credentials first (no request is made without them), then one probe request.

    Scripted models pass without a request: they are sandlot's own and need nothing.
    """
    problems = missing_credentials(config)
    if problems:
        return ModelCheck(problems=problems)
    if config.model.startswith("scripted/"):
        return ModelCheck()
    return await probe_model(config, timeout_sec)
