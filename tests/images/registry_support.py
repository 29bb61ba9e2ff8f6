"""A real OCI registry on loopback and images built for it without a daemon.

Debian's `docker-registry` serves plain HTTP on 127.0.0.1 (no public registry is reachable
from the test machines); umoci builds the images layer by layer and skopeo pushes them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandlot.hostguard import remove_tree

TOOLS = ("docker-registry", "skopeo", "umoci", "busybox")


def require_tools() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/install.sh installs them)")


@dataclass
class Registry:
    address: str
    storage: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def blob_file(self, digest: str) -> Path:
        hexdigest = digest.split(":", 1)[1]
        return (self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256"
                / hexdigest[:2] / hexdigest / "data")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash as htpasswd -B makes it, by the system's libcrypt (no htpasswd tool
    needed)."""
    import ctypes
    import ctypes.util

    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p,
                                  ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", 10, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        pytest.skip("this system's libcrypt makes no bcrypt hashes")
    return hashed.decode()


@contextmanager
def running_registry(folder: Path, *, users: dict[str, str] | None = None,
                     ) -> Iterator[Registry]:
    """A registry of its own on a free loopback port, stopped (only it) afterwards; with
    `users` (name -> password), it wants their credentials (HTTP basic, htpasswd)."""
    require_tools()
    storage = folder / "storage"
    storage.mkdir(parents=True)
    port = _free_port()
    config = folder / "config.yml"
    auth = ""
    if users:
        htpasswd = folder / "htpasswd"
        htpasswd.write_text("".join(f"{name}:{bcrypt_hash(pw)}\n" for name, pw in users.items()))
        auth = f"auth:\n  htpasswd:\n    realm: sandlot-test\n    path: {htpasswd}\n"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {storage}\nhttp:\n  addr: 127.0.0.1:{port}\n"
                      + auth)
    log = (folder / "registry.log").open("wb")
    process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    registry = Registry(f"127.0.0.1:{port}", storage, process)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://{registry.address}/v2/", timeout=1).close()
                break
            except urllib.error.HTTPError:  # 401: it answers, and wants credentials
                break
            except OSError:
                if process.poll() is not None:
                    pytest.fail(f"docker-registry exited: {(folder / 'registry.log').read_text()}")
                time.sleep(0.05)
        else:
            pytest.fail("docker-registry did not answer on loopback within 10 s")
        yield registry
    finally:
        registry.stop()
        log.close()


def registry_for_local_sandbox(folder: Path) -> Iterator[Registry]:
    """A running registry for tests of the local sandbox (skipped where it cannot run)."""
    from sandlot.errors import SandboxError
    from sandlot.sandbox.local_backend import check_local_backend

    try:
        check_local_backend()
    except SandboxError as exc:
        pytest.skip(f"local sandbox cannot run here: {exc}")
    with running_registry(folder) as registry:
        yield registry


#: One layer: a function that changes the unpacked root before it is packed.
LayerStep = Callable[[Path], None]


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {proc.stderr[-800:]}")
    return proc.stdout


def push_image(registry: Registry, workdir: Path, name: str, layers: list[LayerStep], *,
               config: list[str] = (), creds: str | None = None) -> str:
    """Build an image of `layers` (each one umoci layer) and push it as `name`
    (repository:tag) to `registry`; returns its manifest digest."""
    layout = workdir / f"layout-{name.replace('/', '_').replace(':', '_')}"
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:img")
    for step in layers:
        bundle = workdir / "bundle"
        _run("umoci", "unpack", "--image", f"{layout}:img", str(bundle))
        step(bundle / "rootfs")
        _run("umoci", "repack", "--image", f"{layout}:img", str(bundle))
        shutil.rmtree(bundle)
    if config:
        _run("umoci", "config", "--image", f"{layout}:img", *config)
    login = ["--dest-creds", creds] if creds else []
    _run("skopeo", "copy", "--quiet", "--dest-tls-verify=false", *login, f"oci:{layout}:img",
         f"docker://{registry.address}/{name}")
    return _run("skopeo", "inspect", "--tls-verify=false", *(["--creds", creds] if creds else []),
                "--format", "{{.Digest}}", f"docker://{registry.address}/{name}").strip()


def busybox_root(root: Path) -> None:
    """A base layer: a static busybox as /bin/sh, a marker, files the next layer hides."""
    (root / "bin").mkdir(exist_ok=True)
    shutil.copy2(shutil.which("busybox") or "/bin/busybox", root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "marker").write_text("from the test image\n")
    (root / "old").mkdir()
    (root / "old" / "gone.txt").write_text("deleted by the next layer\n")
    (root / "old" / "kept.txt").write_text("kept\n")


def busybox_applets(root: Path) -> None:
    """Every busybox applet as a link in /bin (sh, sleep, cat, awk...), and a /tmp."""
    busybox_root(root)
    applets = subprocess.run(["busybox", "--list"], capture_output=True, text=True,
                             check=True, timeout=30).stdout.split()
    for applet in applets:
        link = root / "bin" / applet
        if not os.path.lexists(link):
            link.symlink_to("busybox")
    (root / "tmp").mkdir(mode=0o1777, exist_ok=True)
    (root / "tmp").chmod(0o1777)


def host_program(root: Path, name: str) -> Path:
    """The host's program `name` and the libraries it loads, at their host paths; returns
    the program's path."""
    program = Path(shutil.which(name) or f"/bin/{name}").resolve()
    needed = subprocess.run(["ldd", str(program)], capture_output=True, text=True,
                            check=True, timeout=30).stdout
    files = [program] + [Path(word) for line in needed.splitlines() for word in line.split()
                         if word.startswith("/")]
    for path in files:
        target = root / str(path).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path.resolve(), target)
    return program


def host_bash(root: Path) -> None:
    """The host's bash and the libraries it loads (Harbor runs `bash /tests/test.sh`)."""
    bash = host_program(root, "bash")
    if not os.path.lexists(root / "bin" / "bash"):
        (root / "bin" / "bash").symlink_to(str(bash))


def runner_user(root: Path) -> None:
    """A user `runner` (uid 1000) with a home and a work folder it owns, and util-linux's
    setpriv (what the local sandbox runs a command as a user with)."""
    setpriv = host_program(root, "setpriv")
    if os.path.islink(root / "bin" / "setpriv"):  # busybox's applet: not util-linux's
        (root / "bin" / "setpriv").unlink()
        (root / "bin" / "setpriv").symlink_to(str(setpriv))
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n"
                                         "runner:x:1000:1000::/home/runner:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\nrunner:x:1000:\n")
    work = root / "home" / "runner" / "work"
    work.mkdir(parents=True)
    for folder in (work, work.parent):
        os.chown(folder, 1000, 1000)


#: The Debian release of the "real" test image: another Python than the host's (Debian 12
#: has 3.11; trixie has 3.13), so a task can tell which root it runs on.
OTHER_DEBIAN = "trixie"
OTHER_DEBIAN_LAYOUT = f"debian-{OTHER_DEBIAN}-python-1"


def other_debian_layout(keep: Path) -> Path:
    """An OCI layout (tag `img`) of a debootstrap'd Debian trixie (minbase + python3) with
    /etc/marker, built once per machine and kept under `keep`; skips without a mirror."""
    layout = keep / OTHER_DEBIAN_LAYOUT
    if (layout / "index.json").is_file():
        return layout
    import os
    import sys
    import tempfile

    sandbox_tests = str(Path(__file__).resolve().parents[1] / "sandbox")
    if sandbox_tests not in sys.path:  # docker_support's home, when only tests/images run
        sys.path.insert(0, sandbox_tests)
    from docker_support import host_debian_mirror

    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (apt-get install debootstrap)")
    mirror = os.environ.get("SANDLOT_DEBIAN_MIRROR") or host_debian_mirror()
    if mirror is None:
        pytest.skip("no Debian mirror: the host's apt names none; set SANDLOT_DEBIAN_MIRROR")
    keep.mkdir(parents=True, exist_ok=True)
    # Not TemporaryDirectory: a debootstrap cut short may leave /proc mounted in its root,
    # and remove_tree refuses to delete through a mount (the host's /proc behind it).
    tmp = tempfile.mkdtemp(prefix="sandlot-debootstrap-", dir="/var/tmp")
    try:
        root = Path(tmp) / "root"
        proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3-minimal",
                               OTHER_DEBIAN, str(root), mirror],
                              capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            pytest.skip(f"debootstrap {OTHER_DEBIAN} failed (no mirror?): {proc.stderr[-500:]}")
        (root / "etc" / "marker").write_text(f"debian {OTHER_DEBIAN} test image\n")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / cache).glob("*.deb"):
                entry.unlink()
        layer = Path(tmp) / "layer.tar"
        # The mount points' contents (a debootstrap may hold /proc mounted) stay out.
        _run("tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(layer),
             "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./dev/*", ".")
        building = keep / f".{OTHER_DEBIAN_LAYOUT}-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        _run("umoci", "init", "--layout", str(building))
        _run("umoci", "new", "--image", f"{building}:img")
        _run("umoci", "raw", "add-layer", "--image", f"{building}:img", str(layer))
        _run("umoci", "config", "--image", f"{building}:img", "--config.env",
             "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        os.rename(building, layout)
    finally:
        remove_tree(Path(tmp))
    return layout


def push_layout(registry: Registry, layout: Path, name: str) -> str:
    """Push an OCI layout's `img` as `name`; returns its manifest digest."""
    _run("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:img",
         f"docker://{registry.address}/{name}")
    return _run("skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                f"docker://{registry.address}/{name}").strip()


def push_other_formats(registry: Registry, layout: Path, name: str) -> tuple[str, str]:
    """Push the layout's `img` twice more, as registries often hold images: in Docker's
    manifest format (`<name>-docker:1`) and as a multi-platform index whose entries are
    that image (`<name>-multi:1`). Returns the registry's digests of the two: what an
    engine's RepoDigests names, unlike the OCI manifest skopeo converts a pull into."""
    import hashlib
    import json

    _run("skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--format", "v2s2",
         f"oci:{layout}:img", f"docker://{registry.address}/{name}-docker:1")
    index_file = json.loads((layout / "index.json").read_text())
    image = next(m for m in index_file["manifests"]
                 if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "img")
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine,
                                                          os.uname().machine)
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": image["mediaType"], "digest": image["digest"],
                       "size": image["size"], "platform": {"architecture": arch, "os": "linux"}}
                      for arch in sorted({"s390x", machine})]}).encode()
    index_digest = "sha256:" + hashlib.sha256(index).hexdigest()
    (layout / "blobs" / "sha256" / index_digest.split(":")[1]).write_bytes(index)
    index_file["manifests"].append({
        "mediaType": "application/vnd.oci.image.index.v1+json", "digest": index_digest,
        "size": len(index), "annotations": {"org.opencontainers.image.ref.name": "multi"}})
    (layout / "index.json").write_text(json.dumps(index_file))
    _run("skopeo", "copy", "--quiet", "--all", "--dest-tls-verify=false", f"oci:{layout}:multi",
         f"docker://{registry.address}/{name}-multi:1")
    docker_digest = _run("skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                         f"docker://{registry.address}/{name}-docker:1").strip()
    return docker_digest, index_digest
