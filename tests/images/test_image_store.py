"""Pulling task images without a daemon: a real registry on loopback, real skopeo."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_support import (
    Registry,
    busybox_root,
    push_image,
    push_other_formats,
    running_registry,
)

from sandlot.images import ImagePullError, ImageStore
from sandlot.sandbox import registry_auth_file

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def drop_gone(root: Path) -> None:
    (root / "old" / "gone.txt").unlink()
    (root / "etc" / "second").write_text("second layer\n")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture(scope="module")
def base_image(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """`<registry>/test/base:1`: two layers, the second deleting a file of the first."""
    return push_image(registry, tmp_path_factory.mktemp("build"), "test/base:1",
                      [busybox_root, drop_gone],
                      config=["--config.env", "MARKER=1", "--config.workingdir", "/app"])


def pull(store: ImageStore, ref: str):
    return asyncio.run(store.pull(ref))


def test_a_pull_unpacks_each_layer_with_overlay_whiteouts(registry, base_image, tmp_path):
    store = ImageStore(tmp_path / "images")
    image = pull(store, f"{registry.address}/test/base:1")
    assert image.digest == base_image
    assert len(image.layers) == 2 and len(image.unpacked) == 2
    base, top = image.layers
    assert (base / "etc" / "marker").read_text() == "from the test image\n"
    assert (base / "old" / "gone.txt").is_file()
    whiteout = os.lstat(top / "old" / "gone.txt")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == os.makedev(0, 0)
    assert not (top / "old" / "kept.txt").exists()
    assert (top / "etc" / "second").read_text() == "second layer\n"
    assert "MARKER=1" in image.config["Env"] and image.config["WorkingDir"] == "/app"
    assert os.access(base / "bin" / "busybox", os.X_OK)
    record = store.root / "pulled" / f"{base_image.split(':')[1]}.json"
    assert record.is_file()
    assert not any((store.root / "tmp").iterdir())


def test_the_second_pull_takes_every_layer_from_the_cache(registry, base_image, tmp_path):
    store = ImageStore(tmp_path / "images")
    first = pull(store, f"{registry.address}/test/base:1")
    inodes = [os.stat(layer).st_ino for layer in first.layers]
    again = pull(store, f"{registry.address}/test/base:1")
    assert again.digest == first.digest and again.layers == first.layers
    assert again.unpacked == ()
    assert [os.stat(layer).st_ino for layer in again.layers] == inodes
    assert len(list((store.root / "layers").iterdir())) == 2


def test_a_digest_pin_pulls_that_image_and_later_needs_no_registry(base_image, tmp_path):
    with running_registry(tmp_path / "registry") as own:
        digest = push_image(own, tmp_path / "build", "test/pinned:1", [busybox_root])
        push_image(own, tmp_path / "build2", "test/other:1", [busybox_root])
        store = ImageStore(tmp_path / "images")
        pinned = f"{own.address}/test/pinned@{digest}"
        assert pull(store, pinned).digest == digest
        tagged = pull(store, f"{own.address}/test/other:1")
    # The registry is gone: a pinned image already in the cache is used offline, and so
    # is a tag pulled before (as `docker run` uses a local tag), at the digest it had.
    offline = pull(store, pinned)
    assert offline.digest == digest and offline.unpacked == ()
    again = pull(store, f"{own.address}/test/other:1")
    assert again.digest == tagged.digest and again.unpacked == ()
    with pytest.raises(ImagePullError, match="cannot pull"):
        pull(store, f"{own.address}/test/pinned:1")  # a tag never pulled needs its registry


def test_a_missing_image_is_one_line_naming_image_and_registry(registry, tmp_path):
    store = ImageStore(tmp_path / "images")
    with pytest.raises(ImagePullError) as err:
        pull(store, f"{registry.address}/test/nothing:1")
    message = str(err.value)
    assert "\n" not in message
    assert f"{registry.address}/test/nothing:1" in message
    assert f"from {registry.address}" in message
    assert not list((store.root / "pulled").iterdir())


def test_a_pull_cut_short_leaves_nothing_a_later_trial_would_use(tmp_path):
    with running_registry(tmp_path / "registry") as own:
        digest = push_image(own, tmp_path / "build", "test/broken:1",
                            [busybox_root, drop_gone])
        store = ImageStore(tmp_path / "images")
        manifest = pull(store, f"{own.address}/test/broken:1")  # learn the layer digests
        assert manifest.digest == digest
        top_layer = manifest.layers[1].name
        # A fresh cache; the registry loses the top layer's blob mid-way.
        fresh = ImageStore(tmp_path / "fresh")
        own.blob_file(f"sha256:{top_layer_blob(store, digest)}").unlink()
        with pytest.raises(ImagePullError, match=f"from {own.address}"):
            pull(fresh, f"{own.address}/test/broken:1")
    assert not list((fresh.root / "pulled").iterdir())
    assert not (fresh.root / "layers" / top_layer).exists()
    assert not list((fresh.root / "layers").iterdir())
    assert not list((fresh.root / "tmp").iterdir())


def top_layer_blob(store: ImageStore, manifest_digest: str) -> str:
    import json

    manifest = json.loads((store.blobs / "sha256" / manifest_digest.split(":")[1]).read_text())
    return str(manifest["layers"][1]["digest"]).split(":")[1]


def test_an_invalid_reference_is_refused_before_any_network(tmp_path):
    store = ImageStore(tmp_path / "images")
    with pytest.raises(ImagePullError, match="not a valid repository name"):
        pull(store, "127.0.0.1:1/Test/UPPER:1")


def test_over_its_cap_the_cache_evicts_unleased_images_used_longest_ago(registry, tmp_path):
    """Three images sharing the busybox base layer (each ~3 MB of its own, unpacked and
    as a blob); a cap that holds two of them, not three."""
    def extra(name: str):
        def layer(root: Path) -> None:
            (root / f"{name}.bin").write_bytes(os.urandom(3_000_000))
        return layer

    names = ("evict/a:1", "evict/b:1", "evict/c:1")
    for name in names:
        push_image(registry, tmp_path / f"build-{name[6]}", name,
                   [busybox_root, extra(name[6])])
    probe = ImageStore(tmp_path / "probe")
    pull(probe, f"{registry.address}/{names[0]}")
    one_image = probe.size()
    probe.close()

    store = ImageStore(tmp_path / "images", max_bytes=int(one_image * 2.2))
    first = pull(store, f"{registry.address}/{names[0]}")
    store.close()  # the job that used it is over: it may go
    # Another job still runs on b: it must stay, whatever the cap says.
    job_b = ImageStore(tmp_path / "images")
    second = pull(job_b, f"{registry.address}/{names[1]}")
    third = pull(store, f"{registry.address}/{names[2]}")
    pulled = {p.stem for p in (store.root / "pulled").glob("*.json")}
    assert first.digest.split(":")[1] not in pulled  # evicted: unleased, used longest ago
    assert {second.digest.split(":")[1], third.digest.split(":")[1]} <= pulled
    assert store.size() <= int(one_image * 2.2)
    # Its own layers and blobs went; a layer a kept image shares stayed (the busybox
    # layers are one digest only when umoci packed them within the same second).
    kept_layers = set(second.layers) | set(third.layers)
    for layer in first.layers:
        assert layer.exists() == (layer in kept_layers), layer
    assert not first.layers[1].exists()
    assert not (store.blobs / "sha256" / first.digest.split(":")[1]).exists()
    # Pulled again, it comes back whole.
    again = pull(store, f"{registry.address}/{names[0]}")
    assert all(layer.is_dir() for layer in again.layers)
    job_b.close()
    store.close()


def test_an_image_is_named_by_the_digest_its_registry_gives_it(tmp_path):
    """A Docker-format image (skopeo converts it to OCI) and a multi-platform index (the
    pull takes this platform's image): the pull names each by the registry's digest, as
    an engine's RepoDigests does, then and from the cache; a pin on that digest works
    offline."""
    with running_registry(tmp_path / "registry") as own:
        oci_digest = push_image(own, tmp_path / "build", "test/formats:1", [busybox_root])
        layout = next((tmp_path / "build").glob("layout-*"))
        docker_digest, index_digest = push_other_formats(own, layout, "test/formats")
        assert len({oci_digest, docker_digest, index_digest}) == 3
        store = ImageStore(tmp_path / "images")
        docker = pull(store, f"{own.address}/test/formats-docker:1")
        multi = pull(store, f"{own.address}/test/formats-multi:1")
        assert docker.named_digest == docker_digest and docker.digest != docker_digest
        assert multi.named_digest == index_digest and multi.digest == oci_digest
    offline = ImageStore(tmp_path / "images")
    assert pull(offline, f"{own.address}/test/formats-docker:1").named_digest == docker_digest
    pinned = pull(offline, f"{own.address}/test/formats-multi@{index_digest}")
    assert pinned.named_digest == index_digest and pinned.unpacked == ()


def test_zstd_compressed_layers_unpack_like_gzip_ones(tmp_path):
    with running_registry(tmp_path / "registry") as gzip_only:
        push_image(gzip_only, tmp_path / "build", "test/gzip:1", [busybox_root, drop_gone])
    layout = next((tmp_path / "build").glob("layout-*"))
    # A registry without the gzip blobs (one that has them gets those, not zstd ones).
    with running_registry(tmp_path / "registry-zstd") as own:
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                        "--dest-compress", "--dest-compress-format", "zstd",
                        f"oci:{layout}:img", f"docker://{own.address}/test/zstd:1"],
                       check=True, timeout=300, capture_output=True)
        store = ImageStore(tmp_path / "images")
        image = pull(store, f"{own.address}/test/zstd:1")
    manifest = json.loads((store.blobs / "sha256" / image.digest.split(":")[1]).read_text())
    assert {layer["mediaType"] for layer in manifest["layers"]} == {
        "application/vnd.oci.image.layer.v1.tar+zstd"}
    base, top = image.layers
    assert (base / "etc" / "marker").read_text() == "from the test image\n"
    assert os.access(base / "bin" / "busybox", os.X_OK)
    whiteout = os.lstat(top / "old" / "gone.txt")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == os.makedev(0, 0)
    assert (top / "etc" / "second").read_text() == "second layer\n"


def test_a_registry_that_wants_credentials_gets_them_from_the_users_auth_file(
        tmp_path, monkeypatch):
    with running_registry(tmp_path / "registry", users={"tester": "s3cret"}) as own:
        digest = push_image(own, tmp_path / "build", "test/private:1", [busybox_root],
                            creds="tester:s3cret")
        reference = f"{own.address}/test/private:1"
        with pytest.raises(ImagePullError) as refused:
            pull(ImageStore(tmp_path / "anonymous"), reference)
        message = str(refused.value)
        assert "\n" not in message and reference in message and own.address in message
        assert "s3cret" not in message
        assert "authentication required" in message
        # As Docker and Podman keep credentials: REGISTRY_AUTH_FILE names the file.
        auth = tmp_path / "auth.json"
        login = base64.b64encode(b"tester:s3cret").decode()
        auth.write_text(json.dumps({"auths": {own.address: {"auth": login}}}))
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))
        store = ImageStore(tmp_path / "images", auth_file=registry_auth_file())
        assert pull(store, reference).named_digest == digest
