"""An image reference (`name[:tag][@sha256:…]`) as the registry sees it.

Only what sandlot itself decides is parsed here: which registry a name points at (to
speak plain HTTP to one on loopback, as Docker does) and whether it is pinned by digest.
Short names (`debian:12`) are left to skopeo, which resolves them as the host's container
tools are configured to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandlot.loopback import is_loopback_host

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")


class ImageReferenceError(ValueError):
    """Not an image reference a registry would accept."""


@dataclass(frozen=True)
class ImageRef:
    #: The registry host[:port], or None for a short name (the tools' default registry).
    registry: str | None
    repository: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}" if self.registry else self.repository
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    @property
    def on_loopback(self) -> bool:
        """A registry on this machine (127.0.0.0/8, ::1, localhost): plain HTTP, as Docker."""
        if self.registry is None:
            return False
        host = self.registry.rsplit(":", 1)[0] if not self.registry.startswith("[") \
            else self.registry[1:].split("]", 1)[0]
        return is_loopback_host(host)


def parse_image_ref(text: str) -> ImageRef:
    """Split `text` into registry, repository, tag and digest.

    Raises: ImageReferenceError naming what is wrong.
    """
    rest = text.strip()
    if not rest:
        raise ImageReferenceError("an empty image name")
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.match(digest):
            raise ImageReferenceError(f"{text!r}: the digest must be sha256: and 64 hex digits")
    registry = None
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, rest = first, remainder
    tag = None
    name, colon, maybe_tag = rest.rpartition(":")
    if colon:
        if not _TAG.match(maybe_tag):
            raise ImageReferenceError(f"{text!r}: {maybe_tag!r} is not a valid tag")
        rest, tag = name, maybe_tag
    if not _NAME.match(rest):
        raise ImageReferenceError(f"{text!r}: {rest!r} is not a valid repository name "
                                  "(lowercase letters, digits, . _ - and /)")
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry=registry, repository=rest, tag=tag, digest=digest)


def _same_image(a: str, b: str) -> bool:
    """`debian:12`, `docker.io/library/debian:12` and `library/debian:12` are one image."""
    def norm(ref: str) -> str:
        for prefix in ("docker.io/library/", "docker.io/", "library/", "index.docker.io/"):
            ref = ref.removeprefix(prefix)
        return ref if ":" in ref.rsplit("/", 1)[-1] or "@" in ref else ref + ":latest"
    return norm(a) == norm(b)


def override_image(ref: str, overrides: dict[str, str]) -> str:
    """`--base-image-override`: the NEW image for a reference that names an OLD one."""
    for old, new in overrides.items():
        if _same_image(ref, old):
            return new
    return ref
