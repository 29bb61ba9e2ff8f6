"""docs/cli.md's reference blocks are generated from the CLI (`python -m sandlot.cli_docs`):
they are current, every command has one, and a flag added without regenerating is named."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import pytest
import typer
import typer.main

from conftest import REPO
from sandlot.cli_docs import DOC, StaleDocs, cli_root, command_docs, differences, render
from sandlot.cli_help import tidy_metavars

pytestmark = pytest.mark.timeout(120)


def test_docs_cli_md_says_what_the_cli_does():
    text = DOC.read_text(encoding="utf-8")
    docs = command_docs(cli_root())
    assert render(text, docs) == text, (
        "docs/cli.md is stale: run `python -m sandlot.cli_docs` ("
        + "; ".join(differences(text, docs)) + ")")
    paths = {d.path for d in docs}
    assert {"sandlot run", "sandlot tasks check", "sandlot datasets pull", "sandlot clean",
            "sandlot agents list", "sandlot export"} <= paths
    run = next(d for d in docs if d.path == "sandlot run")
    for flag in ("--config", "--max-trial-tokens", "--temperature", "--model-kwarg",
                 "--dataset", "--json"):
        assert f"`{flag}`" in run.markdown, flag


def _toy(with_new_flag: bool) -> typer.Typer:
    app = typer.Typer(rich_markup_mode=None)

    @app.command()
    def run(n: Annotated[int, typer.Option("-n", help="How many.")] = 1) -> None:
        """Run things."""

    if with_new_flag:
        @app.command("run")
        def run_more(n: Annotated[int, typer.Option("-n", help="How many.")] = 1,
                     fast: Annotated[bool, typer.Option("--fast", help="Go fast.")] = False,
                     ) -> None:
            """Run things."""

    @app.command()
    def other() -> None:
        """Something else."""

    return app


def _docs(app: typer.Typer) -> list:  # type: ignore[type-arg]
    root = typer.main.get_command(app)
    tidy_metavars(root)
    return command_docs(root, prog="toy")


def test_a_flag_added_without_regenerating_is_named():
    skeleton = ("# toy\n<!-- BEGIN GENERATED: toy run -->\n<!-- END GENERATED: toy run -->\n"
                "<!-- BEGIN GENERATED: toy other -->\n<!-- END GENERATED: toy other -->\n")
    doc = render(skeleton, _docs(_toy(with_new_flag=False)))
    assert "| `-n` | `INT` | `1` | How many. |" in doc
    newer = _docs(_toy(with_new_flag=True))
    assert render(doc, newer) != doc
    assert differences(doc, newer) == ["`toy run`: not documented: --fast"]


def test_a_command_without_a_block_or_a_block_without_a_command_is_refused():
    docs = _docs(_toy(with_new_flag=False))
    with pytest.raises(StaleDocs, match="`toy other` has no <!-- BEGIN GENERATED: toy other"):
        render("<!-- BEGIN GENERATED: toy run -->\n<!-- END GENERATED: toy run -->\n", docs)
    with pytest.raises(StaleDocs, match="`toy gone`, which is not a command"):
        render("<!-- BEGIN GENERATED: toy run -->\n<!-- END GENERATED: toy run -->\n"
               "<!-- BEGIN GENERATED: toy other -->\n<!-- END GENERATED: toy other -->\n"
               "<!-- BEGIN GENERATED: toy gone -->\n<!-- END GENERATED: toy gone -->\n", docs)


def test_the_check_command_fails_on_a_stale_copy(tmp_path):
    stale = tmp_path / "cli.md"
    text = DOC.read_text(encoding="utf-8")
    stale.write_text(text.replace("| `--model-kwarg` |", "| `--model-kwarg-gone` |", 1))
    proc = subprocess.run([sys.executable, "-m", "sandlot.cli_docs", "--check", "--doc",
                           str(stale)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 1
    assert "is stale (`sandlot run`: not documented: --model-kwarg; no longer a flag: " \
        "--model-kwarg-gone)" in proc.stderr
    fixed = subprocess.run([sys.executable, "-m", "sandlot.cli_docs", "--doc", str(stale)],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
    assert fixed.returncode == 0 and stale.read_text() == text
