"""`--help` without parsing: the help of the command a command line names, rendered from
its click definition alone.

typer converts every parsed value through pydantic, so letting it parse `sandlot run
--help` imports pydantic (and builds a type adapter) only to print text; asking the
command for its help directly takes a third of the time (benchmarks/cli_start.py).
"""

from __future__ import annotations

from typing import Any, get_args


def asks_for_help(argv: list[str]) -> bool:
    """`--help` among the options, before any `--`."""
    end = argv.index("--") if "--" in argv else len(argv)
    return "--help" in argv[:end]


def help_text(root: Any, argv: list[str], prog: str) -> str | None:
    """The help of the (sub)command `argv` names, or None when a name is not a command
    (then the normal parse says what is wrong)."""
    command = root
    ctx = command.context_class(command, info_name=prog)
    for token in argv:
        if token.startswith("-"):
            break
        commands = getattr(command, "commands", None)
        if commands is None:
            break  # a command's argument (a task folder), not a subcommand
        sub = commands.get(token)
        if sub is None:
            return None
        command = sub
        ctx = command.context_class(command, info_name=token, parent=ctx)
    return str(command.get_help(ctx))


#: How a value's type reads in usage lines and help (instead of typer's `<list[Path]>`).
TYPE_NAMES = {"Path": "PATH", "str": "TEXT", "int": "INT", "float": "NUMBER", "bool": "BOOL"}


def tidy_metavars(command: Any) -> None:
    """Names every value `PATH`, `TEXT`, `INT`, `NUMBER` (or the argument's own name) in
    `command` and its subcommands, as most command-line tools write them."""
    for param in getattr(command, "params", ()):
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        if param.param_type_name == "argument":
            param.metavar = str(param.name).upper()
            continue
        descriptor = getattr(param, "type_descriptor", None)
        annotation = getattr(descriptor, "annotation", None)
        if annotation is None:
            continue
        inner = get_args(annotation)
        if getattr(descriptor, "is_list", False) and inner:
            annotation = inner[0]
        name = getattr(annotation, "__name__", None)
        if name in TYPE_NAMES:
            param.metavar = TYPE_NAMES[name]
    for sub in getattr(command, "commands", {}).values():
        tidy_metavars(sub)
