"""Where registries come from: files on this machine and URLs, Harbor's public registry
when none is named. A URL's last good answer is kept in the cache, so a machine that has
gone offline still resolves the datasets it has run before (and says it used the copy).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sandlot.datasets.registry import Registry, RegistryError, parse_registry, read_registry_file
from sandlot.fsutil import write_atomic

#: Harbor 0.26's default registry (harbor.constants.DEFAULT_REGISTRY_URL).
DEFAULT_REGISTRY_URL = (
    "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json")

#: How long a registry URL may take to answer.
REGISTRY_TIMEOUT_SEC = 30.0


@dataclass(frozen=True)
class RegistrySources:
    """The registries to consult, in order: the files, then the URLs; Harbor's public
    registry when neither is given. The first registry that has a dataset's name
    answers for it."""

    paths: tuple[Path, ...] = ()
    urls: tuple[str, ...] = ()

    def ordered(self) -> list[str]:
        if not self.paths and not self.urls:
            return [DEFAULT_REGISTRY_URL]
        return [str(p) for p in self.paths] + list(self.urls)


@dataclass
class LoadedRegistries:
    registries: list[Registry]
    notes: list[str] = field(default_factory=list)


def load_registries(sources: RegistrySources, cache_root: Path) -> LoadedRegistries:
    """Every registry the sources name, read now. A URL that cannot be fetched falls
    back to its cached copy (noted); with none cached it is a RegistryError naming it."""
    loaded = LoadedRegistries([])
    for path in sources.paths:
        loaded.registries.append(read_registry_file(path.expanduser()))
    for url in sources.urls or (() if sources.paths else (DEFAULT_REGISTRY_URL,)):
        if url.startswith("file://"):
            loaded.registries.append(read_registry_file(Path(url.removeprefix("file://"))))
            continue
        loaded.registries.append(_fetch_url(url, cache_root, loaded.notes))
    return loaded


def _fetch_url(url: str, cache_root: Path, notes: list[str]) -> Registry:
    import httpx

    copy = cache_root / "registries" / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}.json"
    try:
        response = httpx.get(url, timeout=REGISTRY_TIMEOUT_SEC, follow_redirects=True)
        response.raise_for_status()
        text = response.text
    except httpx.HTTPError as exc:
        why = _why(exc)
        try:
            text = copy.read_text(encoding="utf-8")
        except OSError:
            raise RegistryError(f"registry {url}: cannot fetch it ({why}) and no copy is "
                                "cached; check the address and the network, or pass "
                                "--registry-path FILE") from None
        when = datetime.fromtimestamp(copy.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
        notes.append(f"registry {url}: cannot fetch it ({why}); using the copy fetched "
                     f"{when}")
        return parse_registry(text, url)
    registry = parse_registry(text, url)  # only a good answer replaces the cached copy
    write_atomic(copy, text)
    return registry


def _why(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__
