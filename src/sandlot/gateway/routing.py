"""`--model provider/model` to an Upstream: scripted, pass-through HTTP, or LiteLLM."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sandlot.gateway.scripted import find_model
from sandlot.gateway.upstream import (
    PASSTHROUGH,
    HttpUpstream,
    LiteLLMUpstream,
    ScriptedUpstream,
    Upstream,
)


class RoutingError(ValueError):
    """The model name or provider settings cannot work; the message says what to change."""


@dataclass(frozen=True)
class RouteConfig:
    model: str
    api_base: str | None = None
    #: Name of the env var holding the provider key (default: the provider's usual one).
    api_key_env: str | None = None
    scripts_dirs: tuple[Path, ...] = field(default_factory=tuple)


def key_env(config: RouteConfig) -> str | None:
    """The variable the job's provider key is read from, when sandlot knows it."""
    if config.api_key_env:
        return config.api_key_env
    route = PASSTHROUGH.get(config.model.partition("/")[0])
    return route[1] if route else None


class Router:
    """One upstream per wire format for the job's model, created on first use."""

    def __init__(self, config: RouteConfig, env: Mapping[str, str] | None = None) -> None:
        """`env`: where the provider's key is read (default: this process's environment;
        a cluster node gets the driver's key this way, never through its environment)."""
        self.config = config
        self._env = os.environ if env is None else env
        provider, sep, model_id = config.model.partition("/")
        if not sep or not provider or not model_id:
            raise RoutingError(f"--model must be provider/model (e.g. openai/gpt-4.1, "
                               f"anthropic/claude-sonnet-4-5, scripted/solver), got "
                               f"{config.model!r}")
        self.provider, self.model_id = provider, model_id
        self._upstreams: dict[str, Upstream] = {}
        self._scripted: ScriptedUpstream | None = None
        if provider == "scripted":
            self._scripted = ScriptedUpstream(find_model(model_id, list(config.scripts_dirs)))

    def _key(self, default_env: str | None) -> str | None:
        env = self.config.api_key_env or default_env
        return self._env.get(env) if env else None

    def upstream(self, fmt_name: str) -> Upstream:
        if self._scripted is not None:
            return self._scripted
        if fmt_name in self._upstreams:
            return self._upstreams[fmt_name]
        route = PASSTHROUGH.get(self.provider)
        upstream: Upstream
        if route is not None and fmt_name in route[2]:
            base = self.config.api_base or route[0]
            if base is None:
                raise RoutingError(f"provider {self.provider!r} needs --api-base "
                                   "(e.g. http://host:8000/v1)")
            upstream = HttpUpstream(self.provider, self.model_id, base, self._key(route[1]))
        else:
            upstream = LiteLLMUpstream(self.config.model, self.config.api_base,
                                       self._key(route[1] if route else None))
        self._upstreams[fmt_name] = upstream
        return upstream

    def extra_prices(self) -> dict[str, dict[str, float]]:
        """Prices the bundled map cannot know (scripted models declare their own)."""
        if self._scripted is not None and (entry := self._scripted.model.price_entry()):
            return {self.config.model: entry}
        return {}

    async def aclose(self) -> None:
        for upstream in self._upstreams.values():
            await upstream.aclose()
