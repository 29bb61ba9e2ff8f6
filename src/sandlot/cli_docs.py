"""docs/cli.md's reference blocks, generated from the CLI itself so they cannot drift.

Each command has a block in docs/cli.md between `<!-- BEGIN GENERATED: sandlot run -->`
and `<!-- END GENERATED: sandlot run -->`: its usage line, what it does, and a table of
its arguments and options (names, value, default, environment variable, range, help)
taken from the command's definition. The prose around the blocks is written by hand.

    python -m sandlot.cli_docs            rewrite the blocks in docs/cli.md
    python -m sandlot.cli_docs --check    exit 1, naming what differs, if they are stale

The test suite runs the check (tests/test_cli_docs.py), so a flag added without
regenerating fails CI.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[^>]+?) -->\n)(?P<body>.*?)"
                   r"(<!-- END GENERATED: (?P=name) -->)", re.S)


class StaleDocs(Exception):
    """docs/cli.md does not say what the CLI does; the message names each difference."""


@dataclass(frozen=True)
class CommandDoc:
    path: str  # "sandlot run"
    markdown: str
    flags: tuple[str, ...]


def cli_root() -> Any:
    """The click command tree `sandlot` runs (with its tidied value names)."""
    import typer.main

    from sandlot.cli import app
    from sandlot.cli_help import tidy_metavars

    root = typer.main.get_command(app)
    tidy_metavars(root)
    return root


def command_docs(root: Any, prog: str = "sandlot") -> list[CommandDoc]:
    """Every command that runs something (not the groups), in the order of `--help`."""
    out: list[CommandDoc] = []

    def walk(command: Any, ctx: Any) -> None:
        commands = getattr(command, "commands", None)
        if commands is None:
            out.append(_render(command, ctx))
            return
        for name, sub in commands.items():
            walk(sub, sub.context_class(sub, info_name=name, parent=ctx))

    walk(root, root.context_class(root, info_name=prog))
    return out


def _render(command: Any, ctx: Any) -> CommandDoc:
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    lines = ["```", usage, "```", ""]
    if command.help:
        lines += [_paragraphs(command.help), ""]
    rows, flags = [], []
    for param in command.params:
        if param.name == "help" or getattr(param, "hidden", False):
            continue
        names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
        if param.param_type_name == "argument":
            names = f"`{param.metavar or str(param.name).upper()}`"
        if param.param_type_name == "option":
            flags.extend(param.opts)
        value = "" if getattr(param, "is_flag", False) or param.param_type_name == "argument" \
            else f"`{param.metavar}`" if param.metavar else ""
        rows.append(f"| {names} | {value} | {_default(param)} | {_cell(_help(param))} |")
    if rows:
        lines += ["| option | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    if command.epilog:
        lines += [_paragraphs(command.epilog), ""]
    return CommandDoc(ctx.command_path, "\n".join(lines), tuple(flags))


def _help(param: Any) -> str:
    text = " ".join((getattr(param, "help", None) or "").split())
    extras = []
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None or high is not None:
        extras.append(" to ".join(str(v) for v in (low, high) if v is not None)
                      if low is not None and high is not None
                      else (f"≥ {low}" if low is not None else f"≤ {high}"))
    if (getattr(param, "multiple", False) or getattr(param, "nargs", 1) == -1) \
            and "repeatable" not in text:
        extras.append("repeatable")
    if param.envvar:
        extras.append(f"env `{param.envvar}`")
    if getattr(param, "required", False):
        extras.append("required")
    return text + (f" ({'; '.join(extras)})" if extras else "")


def _default(param: Any) -> str:
    default = param.default
    if default is None or default == [] or default == () or default is False:
        return ""
    if callable(default):
        return ""
    return f"`{default}`"


def _cell(text: str) -> str:
    """Text safe in a table cell: no column breaks, no tags a renderer would swallow."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _paragraphs(text: str) -> str:
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def render(doc: str, docs: list[CommandDoc]) -> str:
    """`doc` with every block replaced by its command's reference. Raises StaleDocs when a
    command has no block or a block names no command."""
    by_path = {d.path: d for d in docs}
    named = {m.group("name") for m in BLOCK.finditer(doc)}
    missing = [p for p in by_path if p not in named]
    unknown = sorted(named - set(by_path))
    if missing or unknown:
        raise StaleDocs("; ".join(
            [*(f"`{p}` has no <!-- BEGIN GENERATED: {p} --> block" for p in missing),
             *(f"a block names `{p}`, which is not a command" for p in unknown)]))
    return BLOCK.sub(lambda m: m.group(1) + by_path[m.group("name")].markdown + "\n"
                     + m.group(4), doc)


def differences(doc: str, docs: list[CommandDoc]) -> list[str]:
    """What the blocks in `doc` say differently from the CLI, per command and flag."""
    out: list[str] = []
    current = {m.group("name"): m.group("body") for m in BLOCK.finditer(doc)}
    for command in docs:
        body = current.get(command.path)
        if body is None:
            out.append(f"`{command.path}` is not documented")
            continue
        if body == command.markdown + "\n":
            continue
        documented = set(re.findall(r"`(--?[A-Za-z0-9][\w-]*)`", body))
        added = [f for f in command.flags if f not in documented]
        removed = sorted(f for f in documented if f.startswith("-")
                         and f not in command.flags
                         and f not in _secondary(command))
        said = []
        if added:
            said.append(f"not documented: {', '.join(added)}")
        if removed:
            said.append(f"no longer a flag: {', '.join(removed)}")
        out.append(f"`{command.path}`: " + ("; ".join(said) or "help, default or usage "
                                             "changed"))
    return out


def _secondary(command: CommandDoc) -> set[str]:
    return set(re.findall(r"`(--?[A-Za-z0-9][\w-]*)`", command.markdown))


def main() -> None:
    parser = argparse.ArgumentParser(description="Generate docs/cli.md's reference blocks.")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/cli.md is stale, naming what differs")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args()
    text = args.doc.read_text(encoding="utf-8")
    docs = command_docs(cli_root())
    try:
        new = render(text, docs)
    except StaleDocs as exc:
        sys.exit(f"{args.doc}: {exc}")
    if args.check:
        if new != text:
            said = "; ".join(differences(text, docs))
            sys.exit(f"{args.doc} is stale ({said}): run `python -m sandlot.cli_docs`")
        return
    if new != text:
        args.doc.write_text(new, encoding="utf-8")
        print(f"rewrote {args.doc}")


if __name__ == "__main__":
    main()
