"""Parse /app/config/service.ini and compare with the verifier's pristine copy."""
import configparser

import pytest

CFG = "/app/config/service.ini"
ORIGINAL = "/tests/original_service.ini"

CHANGES = {
    ("server", "port"): "9090",
    ("database", "pool_size"): "20",
    ("database", "ssl"): "true",
    ("logging", "level"): "WARNING",
    ("cache", "enabled"): "true",
    ("cache", "ttl_seconds"): "300",
}
REMOVED = {("feature_flags", "legacy_refunds")}


def parse(path):
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str  # keep key case
    with open(path) as fh:
        cp.read_file(fh)
    return cp


@pytest.fixture(scope="module")
def cfg():
    return parse(CFG)


@pytest.fixture(scope="module")
def orig():
    return parse(ORIGINAL)


def test_requested_values(cfg):
    for (sec, key), val in CHANGES.items():
        assert cfg.has_option(sec, key), f"missing {sec}.{key}"
        assert cfg.get(sec, key) == val, f"{sec}.{key} = {cfg.get(sec, key)!r}, want {val!r}"


def test_removed_key(cfg):
    for sec, key in REMOVED:
        assert not cfg.has_option(sec, key), f"{sec}.{key} should be removed"


def test_everything_else_unchanged(cfg, orig):
    assert cfg.sections() == orig.sections(), "section list/order changed"
    for sec in orig.sections():
        expected = {k: v for k, v in orig.items(sec) if (sec, k) not in REMOVED}
        for (s, k), v in CHANGES.items():
            if s == sec:
                expected[k] = v
        assert dict(cfg.items(sec)) == expected, f"section [{sec}] differs"


def test_comments_preserved():
    def comments(path):
        with open(path) as fh:
            return [l.strip() for l in fh if l.strip().startswith((";", "#"))]
    assert comments(CFG) == comments(ORIGINAL)


def test_comment_stays_in_its_section():
    with open(CFG) as fh:
        lines = [l.strip() for l in fh]
    i = lines.index("; one of DEBUG, INFO, WARNING, ERROR")
    assert lines[i + 1] == "level = WARNING"
