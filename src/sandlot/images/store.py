"""Images pulled from their registry without a daemon, kept in sandlot's cache.

skopeo speaks to the registry (auth, TLS, platform, digests); sandlot keeps what it
fetched content-addressed, shared by every trial and job:

    <cache>/images/blobs/sha256/<hex>     manifests, configs, layer tars (skopeo's writes)
    <cache>/images/layers/<hex>/          one unpacked layer per layer digest (overlay form)
    <cache>/images/pulled/<hex>.json      one pulled image: its manifest digest, config and
                                          layer digests, written last
    <cache>/images/refs/<sha>.json        the digest a name:tag had when it was pulled: the
                                          tag is used from the cache, as Docker does

Every entry appears whole or not at all: a layer is unpacked into a temporary folder and
renamed into place, and an image's record is written (atomically) only once all of its
layers are in place, so a pull cut short leaves nothing a later trial would use.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sandlot.fsutil import write_json
from sandlot.hostguard import remove_tree
from sandlot.images.reference import ImageRef, parse_image_ref
from sandlot.images.unpack import LayerUnpackError, unpack_layer
from sandlot.trees import disk_usage

PULL_TIMEOUT_SEC = 1800.0
#: The cache's subfolder that holds pulled images (`sandlot clean --images`).
IMAGES_FOLDER = "images"
_MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                   "application/vnd.docker.distribution.manifest.v2+json")


class ImagePullError(Exception):
    """The image could not be pulled or unpacked; the message is one line for the user."""


@dataclass(frozen=True)
class PulledImage:
    """An image in the cache, ready to stack: `layers` oldest first."""

    ref: str
    #: The digest of the image manifest in the cache (after skopeo's conversion to OCI,
    #: for this platform): the cache's key for it.
    digest: str
    layers: tuple[Path, ...]
    #: The image config's `config` (Env, WorkingDir, User, Entrypoint, Cmd, ...).
    config: dict[str, Any] = field(default_factory=dict)
    #: Layer digests this pull unpacked (empty when every layer was already cached).
    unpacked: tuple[str, ...] = ()
    #: The digest the registry names the image by (of a multi-platform image, its index's;
    #: of a Docker-format one, the Docker manifest's): what an engine's RepoDigests says,
    #: and what result.json names, to compare like with like. Empty: as `digest`.
    registry_digest: str = ""

    @property
    def named_digest(self) -> str:
        return self.registry_digest or self.digest


@dataclass
class ImageStore:
    """The image cache of one cache folder; safe to share between processes.

    Every image this store pulled (or found cached) stays leased until `close()` (or the
    process's end): a shared lock on `leases/<hex>` that keeps it from being evicted while
    a job may still start sandboxes on it. Over `max_bytes`, the images used longest ago
    that no running job leases are evicted after a pull, layers and blobs another image
    still uses kept.
    """

    root: Path
    #: Registries (host[:port]) spoken to over plain HTTP besides the loopback ones.
    insecure_registries: frozenset[str] = frozenset()
    #: Registry credentials (a Docker/Podman auth.json); None: skopeo's own lookup.
    auth_file: Path | None = None
    skopeo: str = "skopeo"
    #: The cache's size cap (unpacked layers and blobs); None: no cap.
    max_bytes: int | None = None
    _leases: dict[str, int] = field(default_factory=dict, repr=False)

    def close(self) -> None:
        """Release this store's leases: its images may be evicted from now on."""
        for fd in self._leases.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._leases.clear()

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    def layer_dir(self, digest: str) -> Path:
        return self.root / "layers" / _hex(digest)

    async def pull(self, reference: str) -> PulledImage:
        """The image `reference` names, fetched (what the cache lacks) and unpacked.

        Raises: ImagePullError with one line naming the image and the registry.
        """
        try:
            ref = parse_image_ref(reference)
        except ValueError as exc:
            raise ImagePullError(f"cannot pull {reference}: {exc}") from exc
        for folder in (self.blobs, self.root / "layers", self.root / "pulled",
                       self.root / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)
        async with self._locked():
            # Pinned, or pulled before by this name (as `docker run` takes a local tag):
            # no network needed, and every trial of a job runs on the same digest.
            known = await asyncio.to_thread(self._known_digest, ref) or ref.digest
            if known is not None:
                cached = await asyncio.to_thread(self._cached, ref, known)
                if cached is not None:
                    await asyncio.to_thread(self._lease, cached.digest)
                    return cached
            manifest_digest, registry_digest = await self._fetch(ref)
            pulled = await asyncio.to_thread(self._assemble, ref, manifest_digest,
                                             registry_digest)
            # By its name and by the registry's digest: a pin on that digest finds it too.
            for name in {ref, replace(ref, tag=None, digest=registry_digest)}:
                await asyncio.to_thread(self._remember, name, manifest_digest)
            await asyncio.to_thread(self._lease, pulled.digest)
            if self.max_bytes is not None:
                await asyncio.to_thread(self._evict, self.max_bytes)
            return pulled

    def _lease(self, manifest_digest: str) -> None:
        """A shared lock on the image for as long as this store lives, and a mark of its
        use (the record's mtime orders evictions)."""
        record = self.root / "pulled" / f"{_hex(manifest_digest)}.json"
        with contextlib.suppress(OSError):
            os.utime(record)
        if manifest_digest in self._leases:
            return
        leases = self.root / "leases"
        leases.mkdir(exist_ok=True)
        fd = os.open(leases / _hex(manifest_digest), os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._leases[manifest_digest] = fd

    def size(self) -> int:
        """Bytes the cache holds (unpacked layers and blobs, as the disk counts them)."""
        return sum(disk_usage(folder) for folder in (self.root / "layers", self.blobs))

    def _evict(self, max_bytes: int) -> list[str]:
        """Evict unleased images, used longest ago first, until the cache fits
        `max_bytes`; returns the manifest digests evicted. Runs under the store's lock."""
        evicted: list[str] = []
        total = self.size()
        records = sorted((self.root / "pulled").glob("*.json"), key=_mtime)
        for record in records:
            if total <= max_bytes:
                break
            digest = f"sha256:{record.stem}"
            if digest in self._leases or not self._try_exclusive(record.stem):
                continue
            record.unlink(missing_ok=True)
            evicted.append(digest)
            total -= self._drop_unreferenced()
        return evicted

    def _try_exclusive(self, hexdigest: str) -> bool:
        """Whether no job leases the image (an exclusive lock could be had, and is let go
        at once: the record is removed under the store's lock, so no one leases it anew)."""
        lease = self.root / "leases" / hexdigest
        if not lease.exists():
            return True
        fd = os.open(lease, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True

    def _drop_unreferenced(self) -> int:
        """Remove layers and blobs no remaining image uses (and tags pointing at gone
        images); returns the bytes freed."""
        keep_layers: set[str] = set()
        keep_blobs: set[str] = set()
        kept_digests: set[str] = set()
        for record in (self.root / "pulled").glob("*.json"):
            try:
                data = json.loads(record.read_text())
                layers = [str(d) for d in data["layers"]]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            kept_digests.add(f"sha256:{record.stem}")
            keep_layers.update(_hex(d) for d in layers)
            keep_blobs.update(_hex(d) for d in layers)
            keep_blobs.update(_hex(d) for d in data.get("blobs", []))
            keep_blobs.add(record.stem)
        freed = 0
        for folder in (self.root / "layers").iterdir():
            if folder.name not in keep_layers:
                freed += disk_usage(folder)
                remove_tree(folder, ignore_errors=True)
        blobs = self.blobs / "sha256"
        if blobs.is_dir():
            for blob in blobs.iterdir():
                if blob.name not in keep_blobs:
                    freed += disk_usage(blob)
                    blob.unlink(missing_ok=True)
        refs = self.root / "refs"
        if refs.is_dir():
            for ref_record in refs.glob("*.json"):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    if json.loads(ref_record.read_text())["digest"] not in kept_digests:
                        ref_record.unlink()
        return freed

    def _ref_record(self, ref: ImageRef) -> Path:
        return self.root / "refs" / f"{hashlib.sha256(str(ref).encode()).hexdigest()}.json"

    def _known_digest(self, ref: ImageRef) -> str | None:
        """The manifest digest (in the cache) `ref` (a name and tag, or a digest the
        registry names) had when it was last pulled."""
        try:
            record = json.loads(self._ref_record(ref).read_text())
            digest = str(record["digest"])
            _hex(digest)
        except (OSError, ValueError, KeyError, TypeError, ImagePullError):
            return None
        return digest if record.get("ref") == str(ref) else None

    def _remember(self, ref: ImageRef, manifest_digest: str) -> None:
        self._ref_record(ref).parent.mkdir(parents=True, exist_ok=True)
        write_json(self._ref_record(ref), {"ref": str(ref), "digest": manifest_digest})

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        """One pull at a time per cache, across processes: skopeo's shared blob folder
        and the unpacking are not meant for concurrent writers of one digest. The wait
        happens in a thread, so the other trials of this process go on meanwhile."""
        with open(self.root / "lock", "w") as fh:
            await asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _cached(self, ref: ImageRef, manifest_digest: str) -> PulledImage | None:
        """The pulled image of that manifest digest, if its record and layers are here."""
        try:
            record = json.loads((self.root / "pulled" / f"{_hex(manifest_digest)}.json")
                                .read_text())
            digests = [str(d) for d in record["layers"]]
            config = dict(record.get("config") or {})
            registry_digest = str(record.get("registry_digest") or "")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        layers = tuple(self.layer_dir(d) for d in digests)
        if not all(layer.is_dir() for layer in layers):
            return None
        return PulledImage(ref=str(ref), digest=manifest_digest, layers=layers, config=config,
                           registry_digest=registry_digest)

    async def _fetch(self, ref: ImageRef) -> tuple[str, str]:
        """skopeo copies the image into a throw-away layout whose blobs go to the shared
        folder (only the missing ones are downloaded). Returns the manifest digest in the
        cache and the digest the registry names the image by: the copy is pinned to it, so
        a tag that moves meanwhile cannot mix the two."""
        registry_digest = ref.digest or await self._registry_digest(ref)
        pinned = replace(ref, tag=None, digest=registry_digest)
        layout = self.root / "tmp" / f"pull-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            await self._skopeo(ref, ["copy", "--quiet", "--dest-shared-blob-dir",
                                     str(self.blobs), *self._source_flags(ref, "--src-"),
                                     f"docker://{pinned}", f"oci:{layout}:image"])
            index = json.loads((layout / "index.json").read_text())
            return str(index["manifests"][0]["digest"]), registry_digest
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise ImagePullError(f"cannot pull {ref}: skopeo left no image ({exc})") from exc
        finally:
            remove_tree(layout, ignore_errors=True)

    async def _registry_digest(self, ref: ImageRef) -> str:
        """The digest of the manifest the registry serves for `ref`'s tag (an index, for
        a multi-platform image), as an engine's RepoDigests records it."""
        raw = await self._skopeo(ref, ["inspect", "--raw", *self._source_flags(ref, "--"),
                                       f"docker://{ref}"])
        if not raw.strip():
            raise ImagePullError(f"cannot pull {ref}: {_registry_name(ref)} sent no manifest")
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def _source_flags(self, ref: ImageRef, prefix: str) -> list[str]:
        """skopeo's auth and TLS flags for `ref`'s registry (`--src-` for copy)."""
        flags = [f"{prefix}authfile", str(self.auth_file)] if self.auth_file else []
        if ref.on_loopback or (ref.registry or "") in self.insecure_registries:
            flags.append(f"{prefix}tls-verify=false")
        return flags

    async def _skopeo(self, ref: ImageRef, args: list[str]) -> bytes:
        """Run skopeo; its output. Raises ImagePullError in one line naming image and
        registry (skopeo missing, no answer in time, or skopeo's own last line)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.skopeo, *args, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError as exc:
            raise ImagePullError(f"cannot pull {ref}: skopeo is not installed "
                                 "(apt-get install skopeo)") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), PULL_TIMEOUT_SEC)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise ImagePullError(f"cannot pull {ref}: no answer from "
                                 f"{_registry_name(ref)} within {PULL_TIMEOUT_SEC:g}s") from exc
        if proc.returncode != 0:
            raise ImagePullError(f"cannot pull {ref} from {_registry_name(ref)}: "
                                 f"{_last_line(err.decode(errors='replace'))}")
        return out

    def _blob(self, digest: str) -> Path:
        algorithm, _, hexdigest = digest.partition(":")
        return self.blobs / algorithm / hexdigest

    def _assemble(self, ref: ImageRef, manifest_digest: str,
                  registry_digest: str) -> PulledImage:
        record_path = self.root / "pulled" / f"{_hex(manifest_digest)}.json"
        try:
            manifest = json.loads(self._blob(manifest_digest).read_bytes())
            if manifest.get("mediaType", _MANIFEST_TYPES[0]) not in _MANIFEST_TYPES:
                raise ImagePullError(f"cannot use {ref}: a {manifest.get('mediaType')} is "
                                     "not an image manifest")
            config = json.loads(self._blob(manifest["config"]["digest"]).read_bytes())
            digests = [str(layer["digest"]) for layer in manifest.get("layers", [])]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ImagePullError(f"cannot use {ref}: its manifest or config is unreadable "
                                 f"({exc})") from exc
        unpacked = [d for d in digests if self._unpack(ref, d)]
        pulled = PulledImage(ref=str(ref), digest=manifest_digest,
                             layers=tuple(self.layer_dir(d) for d in digests),
                             config=dict(config.get("config") or {}), unpacked=tuple(unpacked),
                             registry_digest=registry_digest)
        # The config's and (for an index) the platform manifest's blobs, for eviction.
        blobs = [str(manifest["config"]["digest"])]
        write_json(record_path, {"ref": pulled.ref, "digest": pulled.digest,
                                 "registry_digest": registry_digest, "layers": digests,
                                 "blobs": blobs, "config": pulled.config})
        return pulled

    def _unpack(self, ref: ImageRef, digest: str) -> bool:
        """The layer in place (True if this call unpacked it)."""
        final = self.layer_dir(digest)
        if final.is_dir():
            return False
        scratch = self.root / "tmp" / f"layer-{_hex(digest)[:16]}-{uuid.uuid4().hex[:8]}"
        try:
            unpack_layer(self._blob(digest), scratch)
            os.rename(scratch, final)
        except LayerUnpackError as exc:
            raise ImagePullError(f"cannot use {ref}: layer {digest[:19]}: {exc}") from exc
        except OSError as exc:
            raise ImagePullError(f"cannot unpack {ref}: layer {digest[:19]}: {exc}") from exc
        finally:
            if scratch.exists():
                remove_tree(scratch, ignore_errors=True)
        return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _hex(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or not all(
            c in "0123456789abcdef" for c in hexdigest):
        raise ImagePullError(f"unexpected digest {digest[:80]!r}")
    return hexdigest


def _registry_name(ref: ImageRef) -> str:
    return ref.registry or "the default registry"


#: skopeo's log format: `time="…" level=fatal msg="…"`.
_LOG_MESSAGE = re.compile(r'\blevel=\w+ msg="(?P<msg>(?:[^"\\]|\\.)*)"')


def _last_line(text: str) -> str:
    """skopeo's last message, without its log decoration."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else "skopeo failed without a message"
    logged = _LOG_MESSAGE.search(line)
    if logged:
        line = re.sub(r'\\(.)', r"\1", logged.group("msg"))
        line = re.sub(r"^initializing source [^ ]+: ", "", line)
    return line[-400:]


