"""The verifier's machinery, as the pristine sandbox states it, judges the agent's
changes: what the verifier loads without being asked is put back, the rest stays."""

from __future__ import annotations

import json

from sandlot.integrity import find_planted_hooks
from sandlot.machinery import Machinery, PythonMachinery, parse_probe
from sandlot.sandbox.changes import Change

STDLIB = "/usr/lib/python3.11"
SITE = "/usr/local/lib/python3.11/dist-packages"
DIST = "/usr/lib/python3/dist-packages"
USER_SITE = "/root/.local/lib/python3.11/site-packages"
PYTHON = PythonMachinery(
    exe="/usr/bin/python3.11",
    sys_path=("/usr/lib/python311.zip", STDLIB, f"{STDLIB}/lib-dynload", SITE, DIST),
    site_dirs=(SITE, DIST, USER_SITE), stdlib_dirs=(STDLIB,),
    loaded=frozenset({"os", "site", "argparse", "pytest", "_pytest", "attr", "pluggy"}))
MERGED_USR = (("/usr/local/sbin", "/usr/local/sbin"), ("/usr/local/bin", "/usr/local/bin"),
              ("/usr/sbin", "/usr/sbin"), ("/usr/bin", "/usr/bin"), ("/sbin", "/usr/sbin"),
              ("/bin", "/usr/bin"))
MACHINERY = Machinery(path_dirs=MERGED_USR, pythons=(PYTHON,), measured=True)
#: What the pristine tree has (exists() answers from it).
PRISTINE = {"/usr/bin/python3", "/usr/bin/awk", "/usr/sbin/useradd", f"{DIST}/six.py"}


def judged(*changes: tuple[str, str], texts: dict[str, str] | None = None,
           machinery: Machinery = MACHINERY, trusted: tuple[str, ...] = (),
           dirs: frozenset[str] = frozenset()) -> dict[str, str]:
    texts = texts or {}
    found = find_planted_hooks([Change(p, k) for p, k in changes], "/app",  # type: ignore[arg-type]
                               read_text=texts.get, exists=lambda p: p in PRISTINE,
                               readlink=lambda p: None, machinery=machinery,
                               trusted=trusted, is_dir=lambda p: p in dirs)
    return {f.path: f.reason + (" [trusted]" if f.trusted else "") for f in found}


def test_the_probe_output_is_parsed_and_noise_skipped() -> None:
    python = {"exe": "/usr/bin/python3.11", "sys_path": [STDLIB, "relative", SITE],
              "site_dirs": [SITE], "stdlib_dirs": [STDLIB], "loaded": ["os", "pytest"]}
    text = ("pathdir\t/usr/local/bin\t/usr/local/bin\npathdir\t/bin\t/usr/bin\n"
            "pathdir\t/opt/missing\t\nnoise from a profile\npython\t{not json\n"
            f"python\t{json.dumps(python)}\n")
    machinery = parse_probe(text)
    assert machinery.measured
    assert machinery.path_dirs == (("/usr/local/bin", "/usr/local/bin"), ("/bin", "/usr/bin"),
                                   ("/opt/missing", "/opt/missing"))
    [parsed] = machinery.pythons
    assert parsed.sys_path == (STDLIB, SITE) and parsed.loaded == {"os", "pytest"}


def test_the_standard_library_is_machinery_in_any_form() -> None:
    found = judged((f"{STDLIB}/argparse.py", "modified"),
                   (f"{STDLIB}/__pycache__/argparse.cpython-311.pyc", "added"),
                   (f"{STDLIB}/newmod.py", "added"), ("/usr/lib/python311.zip", "added"))
    assert set(found) == {f"{STDLIB}/argparse.py",
                          f"{STDLIB}/__pycache__/argparse.cpython-311.pyc",
                          f"{STDLIB}/newmod.py", "/usr/lib/python311.zip"}


def test_what_the_runner_loads_is_machinery_and_other_packages_are_the_agents() -> None:
    found = judged((f"{DIST}/attr/__init__.py", "modified"),
                   (f"{DIST}/_pytest/__pycache__/main.cpython-311.pyc", "added"),
                   (f"{SITE}/pytest/__init__.py", "added"),  # a second pytest, earlier
                   (f"{SITE}/coverage/__init__.py", "added"),  # installed by test.sh
                   (f"{DIST}/six.py", "modified"),  # a vendored module: the agent's work
                   (f"{SITE}/answerpkg/__init__.py", "added"),
                   (f"{SITE}/answerpkg-1.0.dist-info/entry_points.txt", "added"),
                   texts={f"{SITE}/answerpkg-1.0.dist-info/entry_points.txt":
                          "[console_scripts]\nanswer = answerpkg:main\n"})
    assert set(found) == {f"{DIST}/attr/__init__.py",
                          f"{DIST}/_pytest/__pycache__/main.cpython-311.pyc",
                          f"{SITE}/pytest/__init__.py", f"{SITE}/coverage/__init__.py"}


def test_start_up_hooks_in_every_form_and_place() -> None:
    found = judged((f"{USER_SITE}/usercustomize/__init__.py", "added"),
                   ("/app/.hook/sitecustomize.py", "added"),
                   (f"{SITE}/sitecustomize.cpython-311-x86_64-linux-gnu.so", "added"),
                   (f"{SITE}/code.pth", "added"), (f"{SITE}/paths.pth", "added"),
                   (f"{SITE}/plugin-1.0.dist-info/entry_points.txt", "added"),
                   texts={f"{SITE}/code.pth": "import os; os.system('x')\n",
                          f"{SITE}/paths.pth": "/app/src\n",
                          f"{SITE}/plugin-1.0.dist-info/entry_points.txt":
                          "[pytest11]\nplugin = plugin\n"})
    assert set(found) == {f"{USER_SITE}/usercustomize/__init__.py",
                          "/app/.hook/sitecustomize.py",
                          f"{SITE}/sitecustomize.cpython-311-x86_64-linux-gnu.so",
                          f"{SITE}/code.pth", f"{SITE}/plugin-1.0.dist-info/entry_points.txt"}


def test_commands_are_judged_where_the_path_folders_really_are() -> None:
    # /usr/bin/answer-tool is also /bin/answer-tool on a merged /usr: it shadows nothing.
    found = judged(("/usr/bin/answer-tool", "added"), ("/usr/local/bin/python3", "added"),
                   ("/usr/bin/python3", "modified"), ("/usr/local/bin/mytool", "added"),
                   ("/etc/alternatives/awk", "modified"),
                   ("/etc/alternatives/answer", "added"))
    assert found == {
        "/usr/local/bin/python3": "PATH shim shadowing a system command",
        "/usr/bin/python3": "replaced a system command",
        "/etc/alternatives/awk": "alternatives link of a system command, replaced"}


def test_a_path_or_import_folder_replaced_is_put_back_but_a_listed_folder_is_not() -> None:
    assert set(judged(("/usr/local/sbin", "modified"), ("/usr/local", "modified"),
                      (SITE, "added"))) == {"/usr/local/sbin", "/usr/local", SITE}
    # An engine lists the folders a change went through: still folders, nothing replaced.
    assert judged(("/usr/local", "modified"), ("/usr/local/bin", "modified"),
                  dirs=frozenset({"/usr/local", "/usr/local/bin"})) == {}


def test_the_loader_and_the_installers_configuration() -> None:
    found = judged(("/etc/ld.so.preload", "added"), ("/etc/ld.so.conf.d/x.conf", "added"),
                   ("/etc/ld.so.cache", "modified"),
                   ("/usr/lib/x86_64-linux-gnu/libc.so.6", "modified"),
                   ("/usr/lib/x86_64-linux-gnu/libanswer.so.1", "added"),
                   ("/etc/pip.conf", "added"), ("/root/.config/uv/uv.toml", "added"),
                   ("/opt/venv/pip.conf", "added"), ("/root/.npmrc", "modified"),
                   ("/usr/etc/npmrc", "added"), ("/root/.cargo/config.toml", "added"),
                   ("/app/.npmrc", "added"),  # the project's own: the agent's work
                   ("/etc/gitconfig", "modified"), ("/root/.gitconfig", "added"),
                   texts={"/etc/gitconfig": "[include]\n\tpath = /app/x\n",
                          "/root/.gitconfig": "[user]\n\tname = answerer\n"})
    assert set(found) == {"/etc/ld.so.preload", "/etc/ld.so.conf.d/x.conf",
                          "/etc/ld.so.cache", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                          "/etc/pip.conf", "/root/.config/uv/uv.toml", "/etc/gitconfig",
                          "/opt/venv/pip.conf", "/root/.npmrc", "/usr/etc/npmrc",
                          "/root/.cargo/config.toml"}


def test_what_the_tests_read_by_name_stays() -> None:
    assert judged(("/etc/profile.d/answer.sh", "added"), ("/etc/adduser.conf", "modified"),
                  ("/etc/passwd", "modified"), ("/root/.bashrc", "modified"),
                  ("/opt/answer/bin/answer-env", "added"), ("/app/main.py", "modified"),
                  ("/var/lib/dpkg/status", "modified")) == {}


def test_a_trusted_path_is_reported_not_dropped() -> None:
    entry = f"{SITE}/answer_plugin-1.0.dist-info/entry_points.txt"
    found = judged((entry, "added"), (f"{SITE}/pytest/__init__.py", "added"),
                   texts={entry: "[pytest11]\nanswer = answer_plugin\n"},
                   trusted=(f"{SITE}/answer_plugin*",))
    assert found[entry].endswith("[trusted]")
    assert not found[f"{SITE}/pytest/__init__.py"].endswith("[trusted]")


def test_without_a_measured_machinery_the_folders_are_found_by_name() -> None:
    found = judged((f"{SITE}/pytest/__main__.py", "modified"), (f"{DIST}/six.py", "modified"),
                   (f"{STDLIB}/argparse.py", "modified"), ("/usr/local/bin/python3", "added"),
                   machinery=Machinery())
    assert set(found) == {f"{SITE}/pytest/__main__.py", f"{STDLIB}/argparse.py",
                          "/usr/local/bin/python3"}


def test_installer_caches_are_put_back_whole() -> None:
    found = judged(("/root/.cache/uv/archive-v0/abc/pytest/__init__.py", "added"),
                   ("/root/.cache/uv/wheels-v5/pypi/pytest/8.4.1.http", "added"),
                   ("/home/tester/.cache/pip/http-v2/a/b/c", "added"),
                   ("/root/.local/share/uv/python/cpython-3.13/bin/python3", "added"),
                   ("/root/.local/share/uv/tools/pytest/bin/pytest", "modified"),
                   ("/root/.cache/other-tool/state", "added"))
    assert set(found) == {"/root/.cache/uv", "/home/tester/.cache/pip",
                          "/root/.local/share/uv/python", "/root/.local/share/uv/tools"}
