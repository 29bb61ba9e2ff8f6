"""The scripted model: a deterministic provider for tests, demos and dry runs.

A scripted model is a folder of TOML scripts (or one TOML file). Each script applies to
the tasks its `task` glob matches and lists turns; the n-th model request of a trial gets
the n-th turn. A turn says what the model answers: text, thinking, shell commands (`run`),
files to write (`write`), raw tool calls (`tool`), token counts, or a fault to inject.
Shell commands and file writes are mapped onto whichever matching tool the requesting
agent offers, so one script drives every agent.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandlot.gateway.formats.base import ModelTurn, RequestView, ToolCall, ToolSpec, Usage, new_id

SHELL_TOOLS = ("bash", "Bash", "shell", "exec_command", "run_shell_command", "execute",
               "terminal", "run_command", "developer__shell")
WRITE_TOOLS = ("write", "Write", "write_file", "create_file", "str_replace_based_edit_tool",
               "developer__text_editor")
COMMAND_KEYS = ("command", "cmd", "script", "code", "input")
PATH_KEYS = ("path", "file_path", "filePath", "absolute_path", "filename")
CONTENT_KEYS = ("content", "contents", "file_text", "text")
BUILTIN_DIR = Path(__file__).parent / "scripted_models"


class ScriptError(ValueError):
    """A script file is malformed; the message names the file and the problem."""


@dataclass(frozen=True)
class Fault:
    #: An HTTP status ("400", "401", "403", "404", "429", "500", "502", "503", "529"),
    #: "stall" (wait, then answer) or "cut" (a streamed answer stops midway; on a
    #: non-streamed request it does not fire)
    kind: str
    times: int = 1
    retry_after_sec: float | None = None
    seconds: float = 5.0


FAULT_KINDS = ("400", "401", "403", "404", "429", "500", "502", "503", "529", "stall", "cut")


@dataclass
class Turn:
    text: str = ""
    thinking: str = ""
    run: list[str] = field(default_factory=list)
    write: list[tuple[str, str]] = field(default_factory=list)
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fault: Fault | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    finish: str | None = None
    #: Alternatives tried first: (regex on the latest tool result, task glob, turn, regex on
    #: the latest user message).
    cases: list[tuple[str | None, str | None, Turn, str | None]] = field(default_factory=list)


@dataclass
class Script:
    source: str
    task: str
    turns: list[Turn]
    final_text: str = "Done."
    #: Nominal USD per million tokens (input, output, cache read), so dry runs show what
    #: cost accounting looks like.
    price_per_mtok: tuple[float, float, float | None] | None = None
    #: Answer every request past the last turn with the last turn again: a model that
    #: never stops (for budgets and timeouts).
    repeat_last_turn: bool = False


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _turn(raw: Any, where: str) -> Turn:
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: a turn must be a table")
    known = {"text", "thinking", "run", "write", "tool", "fault", "input_tokens",
             "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
             "finish", "cases", "when_tool_result", "when_task", "when_user"}
    unknown = set(raw) - known
    if unknown:
        raise ScriptError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                          f"use {', '.join(sorted(known))}")
    writes = []
    for w in _as_list(raw.get("write")):
        if not isinstance(w, dict) or "path" not in w or "content" not in w:
            raise ScriptError(f"{where}: write needs {{path = ..., content = ...}}")
        writes.append((str(w["path"]), str(w["content"])))
    tools = []
    for t in _as_list(raw.get("tool")):
        if not isinstance(t, dict) or "name" not in t:
            raise ScriptError(f"{where}: tool needs {{name = ..., arguments = {{...}}}}")
        tools.append((str(t["name"]), dict(t.get("arguments") or {})))
    fault = None
    if "fault" in raw:
        f = raw["fault"]
        f = {"kind": f} if isinstance(f, str | int) and not isinstance(f, bool) else f
        if not isinstance(f, dict) or str(f.get("kind")) not in FAULT_KINDS:
            raise ScriptError(f"{where}: fault.kind must be one of {', '.join(FAULT_KINDS)} "
                              "(cut applies to streamed requests only)")
        try:
            retry_after = f.get("retry_after_sec")
            fault = Fault(kind=str(f["kind"]), times=int(f.get("times", 1)),
                          retry_after_sec=None if retry_after is None else _number(retry_after),
                          seconds=_number(f.get("seconds", 5.0)))
        except (TypeError, ValueError) as exc:
            raise ScriptError(f"{where}: fault times/retry_after_sec/seconds must be "
                              f"numbers ({exc})") from None
    cases = []
    for i, c in enumerate(_as_list(raw.get("cases"))):
        case_where = f"{where}.cases[{i}]"
        if not isinstance(c, dict):
            raise ScriptError(f"{case_where}: a case must be a table")
        pattern, user_pattern = c.get("when_tool_result"), c.get("when_user")
        for key, value in (("when_tool_result", pattern), ("when_user", user_pattern)):
            if value is None:
                continue
            try:
                re.compile(value)
            except (re.error, TypeError) as exc:
                raise ScriptError(f"{case_where}: {key} is not a regex: {exc}") from exc
        cases.append((pattern, c.get("when_task"), _turn(
            {k: v for k, v in c.items()
             if k not in ("when_tool_result", "when_task", "when_user")}, case_where),
            user_pattern))
    return Turn(text=str(raw.get("text", "")), thinking=str(raw.get("thinking", "")),
                run=[str(r) for r in _as_list(raw.get("run"))], write=writes, tools=tools,
                fault=fault, input_tokens=raw.get("input_tokens"),
                output_tokens=raw.get("output_tokens"),
                cache_read_tokens=int(raw.get("cache_read_tokens", 0)),
                cache_write_tokens=int(raw.get("cache_write_tokens", 0)),
                reasoning_tokens=int(raw.get("reasoning_tokens", 0)),
                finish=raw.get("finish"), cases=cases)


def load_script(path: Path) -> Script:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScriptError(f"{path}: cannot read the script: {exc}") from exc
    top_level = {"task", "final_text", "price_per_mtok", "turns", "repeat_last_turn"}
    unknown = set(data) - top_level
    if unknown:
        raise ScriptError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; "
                          f"use {', '.join(sorted(top_level))}")
    turns = data.get("turns", [])
    if not isinstance(turns, list):
        raise ScriptError(f"{path}: `turns` must be an array of tables ([[turns]])")
    price = data.get("price_per_mtok")
    prices: tuple[float, float, float | None] | None = None
    if price is not None:
        try:
            if not (isinstance(price, dict) and {"input", "output"} <= set(price)):
                raise ValueError
            read = price.get("cache_read")
            prices = (_number(price["input"]), _number(price["output"]),
                      None if read is None else _number(read))
        except (ValueError, TypeError):
            raise ScriptError(f"{path}: price_per_mtok must be {{input = 3.0, output = 15.0}}"
                              " (numbers, USD per million tokens; optional cache_read)") from None
    repeat = data.get("repeat_last_turn", False)
    if not isinstance(repeat, bool) or (repeat and not turns):
        raise ScriptError(f"{path}: repeat_last_turn must be true or false, and true needs "
                          "at least one [[turns]]")
    return Script(source=str(path), task=str(data.get("task", "*")),
                  turns=[_turn(t, f"{path}: turns[{i}]") for i, t in enumerate(turns)],
                  final_text=str(data.get("final_text", "Done.")), price_per_mtok=prices,
                  repeat_last_turn=repeat)


@dataclass
class ScriptedModel:
    name: str
    scripts: list[Script]

    def price_entry(self) -> dict[str, float] | None:
        """A LiteLLM-style price entry from the first script that declares a price."""
        for script in self.scripts:
            if script.price_per_mtok is not None:
                entry = {"input_cost_per_token": script.price_per_mtok[0] / 1e6,
                         "output_cost_per_token": script.price_per_mtok[1] / 1e6}
                if script.price_per_mtok[2] is not None:
                    entry["cache_read_input_token_cost"] = script.price_per_mtok[2] / 1e6
                return entry
        return None

    def script_for(self, task: str | None) -> Script | None:
        for script in self.scripts:
            if fnmatch.fnmatch(task or "", script.task):
                return script
        return None


def find_model(name: str, search_dirs: list[Path]) -> ScriptedModel:
    """`name` as a folder of scripts or a .toml file in the first dir that has it."""
    for base in [*search_dirs, BUILTIN_DIR]:
        folder, file = base / name, base / f"{name}.toml"
        if folder.is_dir():
            files = sorted(folder.glob("*.toml"))
            if files:
                return ScriptedModel(name, [load_script(f) for f in files])
        if file.is_file():
            return ScriptedModel(name, [load_script(file)])
    looked = ", ".join(str(d) for d in [*search_dirs, BUILTIN_DIR])
    raise ScriptError(f"no scripted model {name!r} (looked for {name}/ or {name}.toml in "
                      f"{looked}); set --scripts-dir")


def pick_turn(script: Script | None, view: RequestView, task: str | None) -> Turn | None:
    """The turn for this request, after its cases; None when the script is over."""
    if script is None or not script.turns:
        return None
    if view.n_assistant_turns >= len(script.turns) and not script.repeat_last_turn:
        return None
    turn = script.turns[min(view.n_assistant_turns, len(script.turns) - 1)]
    for pattern, task_glob, alternative, user_pattern in turn.cases:
        if pattern is not None and not re.search(pattern, view.last_tool_result or ""):
            continue
        if user_pattern is not None and not re.search(user_pattern, view.last_user_text or ""):
            continue
        if task_glob is not None and not fnmatch.fnmatch(task or "", task_glob):
            continue
        return alternative
    return turn


def _find_tool(tools: list[ToolSpec], names: tuple[str, ...]) -> ToolSpec | None:
    by_name = {t.name: t for t in tools}
    for name in names:
        if name in by_name:
            return by_name[name]
    lowered = {t.name.lower(): t for t in tools}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _props(tool: ToolSpec) -> dict[str, Any]:
    props = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    return props if isinstance(props, dict) else {}


def _pick_key(props: dict[str, Any], candidates: tuple[str, ...], default: str) -> str:
    for key in candidates:
        if key in props:
            return key
    return default


def shell_call(tools: list[ToolSpec], command: str) -> ToolCall | None:
    tool = _find_tool(tools, SHELL_TOOLS)
    if tool is None:
        return None
    props = _props(tool)
    key = _pick_key(props, COMMAND_KEYS, "command")
    value: Any = command
    if (props.get(key) or {}).get("type") == "array":
        value = ["bash", "-lc", command]
    args: dict[str, Any] = {key: value}
    required = tool.parameters.get("required") if isinstance(tool.parameters, dict) else None
    if "description" in (required or []):
        args["description"] = "run a command"
    return ToolCall(new_id("call_"), tool.name, args)


def write_call(tools: list[ToolSpec], path: str, content: str) -> ToolCall | None:
    tool = _find_tool(tools, WRITE_TOOLS)
    props = _props(tool) if tool is not None else {}
    if tool is not None and any(k in props for k in CONTENT_KEYS):
        args: dict[str, Any] = {_pick_key(props, PATH_KEYS, "path"): path,
                                _pick_key(props, CONTENT_KEYS, "content"): content}
        if "command" in props:  # editor-style tools: the command that writes a whole file
            choices = (props.get("command") or {}).get("enum") or []
            args["command"] = next((c for c in ("create", "write") if c in choices),
                                   "create" if not choices else choices[0])
        return ToolCall(new_id("call_"), tool.name, args)
    # No file tool: write through the shell with a quoted heredoc.
    marker = "SANDLOT_EOF"
    while marker in content:
        marker += "_"
    body = content if content.endswith("\n") else content + "\n"
    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    return shell_call(tools, f"mkdir -p {shlex.quote(folder or '/')} && "
                             f"cat > {shlex.quote(path)} <<'{marker}'\n{body}{marker}")


def _estimate(text: str) -> int:
    return max(1, len(text) // 4)


def _estimate_chars(n_chars: int) -> int:
    return max(1, n_chars // 4)


def render_turn(turn: Turn | None, script: Script | None, view: RequestView,
                request_chars: int) -> ModelTurn:
    """Turn a script turn into a ModelTurn for the tools this request offers."""
    if turn is None:
        text = script.final_text if script is not None else (
            "scripted model: no script matches this task")
        return ModelTurn(text=text, usage=Usage(_estimate_chars(request_chars),
                                                _estimate(text)))
    calls: list[ToolCall] = []
    problems: list[str] = []
    for command in turn.run:
        call = shell_call(view.tools, command)
        if call is None:
            problems.append(f"no shell tool offered (looked for {', '.join(SHELL_TOOLS)})")
        else:
            calls.append(call)
    reader = _find_tool(view.tools, ("Read",))
    for path, content in turn.write:
        call = write_call(view.tools, path, content)
        if call is None:
            problems.append("no file-writing or shell tool offered")
            continue
        if call.name == "Write" and reader is not None:
            # Claude Code's Write refuses to overwrite a file not read first: read it in
            # the same turn (harmless for a new file), as the model itself would.
            key = _pick_key(_props(reader), PATH_KEYS, "file_path")
            calls.append(ToolCall(new_id("call_"), reader.name, {key: path}))
        calls.append(call)
    offered = {t.name for t in view.tools}
    for name, args in turn.tools:
        if name in offered or not view.tools:
            calls.append(ToolCall(new_id("call_"), name, args))
        else:
            problems.append(f"tool {name!r} is not offered")
    text = turn.text
    if problems:
        text = (text + "\n" if text else "") + "scripted model: " + "; ".join(problems)
    produced = text + turn.thinking + "".join(json.dumps(c.arguments) for c in calls)
    usage = Usage(
        input_tokens=(turn.input_tokens if turn.input_tokens is not None
                      else _estimate_chars(request_chars)),
        output_tokens=turn.output_tokens if turn.output_tokens is not None else _estimate(
            produced),
        cache_read_tokens=turn.cache_read_tokens, cache_write_tokens=turn.cache_write_tokens,
        reasoning_tokens=turn.reasoning_tokens)
    finish = turn.finish or ("tool_calls" if calls else "stop")
    return ModelTurn(text=text, thinking=turn.thinking, tool_calls=calls, usage=usage,
                     finish=finish)
