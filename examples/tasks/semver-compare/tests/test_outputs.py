"""Grade /app/semver.py against the cases in the spec."""
import importlib.util
import itertools

import pytest


@pytest.fixture(scope="module")
def sv():
    spec = importlib.util.spec_from_file_location("semver_under_test", "/app/semver.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


VALID = [
    "0.0.0", "1.2.3", "10.20.30", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-0.3.7",
    "1.0.0-x.7.z.92", "1.0.0-x-y-z.--", "1.0.0-alpha+001", "1.0.0+20130313144700",
    "1.0.0-beta+exp.sha.5114f85", "1.0.0+21AF26D3----117B344092BD", "1.0.0-0a",
    "999999999999.0.1", "1.1.2-prerelease+meta",
]
INVALID = [
    "", "1", "1.2", "1.2.3.4", "01.1.1", "1.01.1", "1.1.01", "v1.2.3", " 1.2.3",
    "1.2.3 ", "1.2.3-", "1.2.3+", "1.2.3-a..b", "1.2.3+a..b", "1.0.0-01",
    "1.2.3-a_b", "1.2.3+a_b", "-1.2.3", "1.2.3-+meta", "a.b.c", "1.2.-3", "1.2.3++",
    "1.2.3\n", "1.\u0663.0",
]
CHAIN = [
    "0.9.9", "1.0.0-0", "1.0.0-2", "1.0.0-10", "1.0.0-0a", "1.0.0-alpha",
    "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
    "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0-alpha", "1.1.0", "1.10.0", "2.0.0",
    "10.0.0", "11.0.0",
]


@pytest.mark.parametrize("v", VALID)
def test_valid(sv, v):
    assert sv.is_valid(v) is True


@pytest.mark.parametrize("v", INVALID)
def test_invalid(sv, v):
    assert sv.is_valid(v) is False


def test_chain_pairwise(sv):
    for (i, a), (j, b) in itertools.product(enumerate(CHAIN), repeat=2):
        want = (i > j) - (i < j)
        assert sv.compare(a, b) == want, (a, b, want)


def test_build_metadata_ignored(sv):
    assert sv.compare("1.0.0+a", "1.0.0+b") == 0
    assert sv.compare("1.0.0-rc.1+build.1", "1.0.0-rc.1") == 0
    assert sv.compare("1.0.0+zzz", "1.0.1-alpha") == -1


def test_compare_rejects_invalid(sv):
    for bad in ["1.0", "1.0.0-01", "v1.0.0"]:
        with pytest.raises(ValueError):
            sv.compare(bad, "1.0.0")
        with pytest.raises(ValueError):
            sv.compare("1.0.0", bad)


def test_sort_versions(sv):
    shuffled = [CHAIN[(i * 7) % len(CHAIN)] for i in range(len(CHAIN))]
    assert sorted(shuffled) != CHAIN
    before = list(shuffled)
    assert sv.sort_versions(shuffled) == CHAIN
    assert shuffled == before


def test_sort_is_stable_for_equal_precedence(sv):
    data = ["2.0.0+b", "1.0.0+z", "2.0.0+a", "1.0.0", "1.0.0+a"]
    assert sv.sort_versions(data) == ["1.0.0+z", "1.0.0", "1.0.0+a", "2.0.0+b", "2.0.0+a"]


def test_sort_rejects_invalid(sv):
    with pytest.raises(ValueError):
        sv.sort_versions(["1.0.0", "nope"])
