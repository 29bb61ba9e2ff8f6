"""Where registries come from: files on this machine and URLs, Harbor's public registry
when none is named. A URL's last good answer is kept in the cache, so a machine that has
gone offline still resolves the datasets it has run before (and says it used the copy).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from sandlot.datasets.registry import Registry, RegistryError, parse_registry, read_registry_file
from sandlot.fsutil import write_atomic
from sandlot.loopback import is_loopback_host

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

    def urls_to_read(self) -> tuple[str, ...]:
        """The URLs, or Harbor's when no registry at all is given."""
        if not self.paths and not self.urls:
            return (DEFAULT_REGISTRY_URL,)
        return self.urls

    def ordered(self) -> list[str]:
        return [str(p) for p in self.paths] + list(self.urls_to_read())


@dataclass
class LoadedRegistries:
    registries: list[Registry]
    notes: list[str] = field(default_factory=list)


def load_registries(sources: RegistrySources, cache_root: Path) -> LoadedRegistries:
    """Every registry the sources name, read now. A URL that cannot be fetched falls
    back to its cached copy (noted); with none cached it is a RegistryError naming it."""
    loaded = LoadedRegistries([])
    for path in sources.paths:  # absolute: results record which file answered
        loaded.registries.append(read_registry_file(path.expanduser().resolve()))
    for url in sources.urls_to_read():
        if url.startswith("file://"):
            loaded.registries.append(read_registry_file(
                Path(url.removeprefix("file://")).resolve()))
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
        cached = parse_registry(text, url)
        refuse_local_sources(cached)
        return cached
    registry = parse_registry(text, url)
    refuse_local_sources(registry)
    write_atomic(copy, text)  # only a good answer replaces the cached copy
    return registry


#: Repository addresses a registry read over the network may name: remote ones only.
REMOTE_GIT = re.compile(r"(https?|ssh|git)://[^/]+/.+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:.+")


def refuse_local_sources(registry: Registry) -> None:
    """A registry fetched from another machine may not name folders or repositories on
    this one (a file:// URL, a path): it would copy this machine's files into a sandbox
    an agent reads. A registry on this machine (a file, a loopback URL) may."""
    where = urlsplit(registry.source)
    if where.scheme not in ("http", "https") or is_loopback_host(where.hostname or ""):
        return
    for dataset in registry.datasets:
        for task in dataset.tasks:
            if task.git_url is None or not REMOTE_GIT.fullmatch(task.git_url):
                where = task.git_url or task.path
                raise RegistryError(
                    f"registry {registry.source}: dataset {dataset.ref}, task {task.name}: "
                    f"{where[:200]!r} is on this machine, which a registry read over the "
                    "network may not name (use --registry-path for a registry of local "
                    "repositories)")


def _why(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__
