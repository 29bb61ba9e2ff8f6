"""A trial's trajectory as one list of steps, whatever agent and wire format produced it.

Two sources, read a page at a time through `LineIndex`:

- **the built-in agent's log** (`agent/builtin_trajectory.jsonl`): one step per line
  (an assistant turn, or a tool call with its arguments, output, duration and error
  flag). The k-th assistant line is the k-th model exchange, so its tokens and latency
  come from line k of the gateway's log.
- **the gateway's log** (`trajectory/llm_trajectory.jsonl`), for every other agent that
  calls a model: each exchange becomes the messages the agent added since its previous
  turn (user prompts, repair feedback, tool results) followed by the model's answer
  (text, thinking, tool calls), in any of the four wire formats.

A step is a plain dict:

    {"i", "kind": "system"|"user"|"assistant"|"tool", "record", "t",
     "text", "thinking", "tool_calls": [{"id", "name", "arguments"}],
     "tool": {"name", "call_id", "arguments", "output", "is_error", "duration_sec"},
     "llm": {exchange summary, see `exchange_summary`}}

Long texts are cut to `TEXT_CAP` characters (`*_truncated` gives the full length); the
whole record stays one click away through the raw-line endpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sandlot.gateway.formats.base import text_of as _flatten
from sandlot.gateway.formats.gemini import response_text
from sandlot.viewer.lines import LRU, IndexCache, parse_line

BUILTIN_LOG = "agent/builtin_trajectory.jsonl"
GATEWAY_LOG = "trajectory/llm_trajectory.jsonl"
TEXT_CAP = 20_000
MAX_PAGE = 500
RESPONSES_MODEL_ITEMS = {"function_call", "reasoning", "custom_tool_call", "local_shell_call"}

_summaries = LRU(50_000)


def _is_assistant_line(head: bytes) -> int:
    return 1 if b'"type": "assistant"' in head or b'"type":"assistant"' in head else 0


def text_of(content: Any) -> str:
    """Flatten message content to text, images shown as "[image]"."""
    return _flatten(content, image="[image]")


def cap(step: dict[str, Any], key: str, value: str | None, limit: int = TEXT_CAP) -> None:
    if value is None:
        return
    if len(value) > limit:
        step[key] = value[:limit]
        step[f"{key}_truncated"] = len(value)
    else:
        step[key] = value


def _args_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


# ---------------------------------------------------------------- exchanges


def exchange_summary(rec: dict[str, Any], line: int) -> dict[str, Any]:
    """The facts of one gateway exchange, without its request and response bodies."""
    usage = rec.get("usage") or {}
    request = rec.get("request") or {}
    n_messages = None
    if isinstance(request.get("messages"), list):
        n_messages = len(request["messages"])
    elif isinstance(request.get("input"), list):
        n_messages = len(request["input"])
    elif isinstance(request.get("contents"), list):
        n_messages = len(request["contents"])
    err = rec.get("error") or rec.get("upstream_error")
    return {
        "line": line, "seq": rec.get("seq"), "format": rec.get("format"),
        "model": rec.get("model"), "requested_model": rec.get("requested_model"),
        "stream": rec.get("stream"), "status": rec.get("status"),
        "attempts": rec.get("attempts"), "retried_errors": rec.get("retried_errors"),
        "started_at": rec.get("started_at"),
        "latency_sec": rec.get("latency_sec"), "ttft_sec": rec.get("ttft_sec"),
        "input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
        "cache_read_tokens": usage.get("cache_read_tokens"),
        "cache_write_tokens": usage.get("cache_write_tokens"),
        "reasoning_tokens": usage.get("reasoning_tokens"),
        "total_tokens": usage.get("total_tokens"), "cost_usd": rec.get("cost_usd"),
        "n_messages": n_messages,
        "error": (err if isinstance(err, str) else json.dumps(err)[:2000]) if err else None,
    }


def assistant_output(fmt: str | None, response: Any) -> dict[str, Any]:
    """The model's answer: text, thinking, tool calls [{id, name, arguments}], finish."""
    out: dict[str, Any] = {"text": "", "thinking": "", "tool_calls": [], "finish": None}
    if not isinstance(response, dict):
        return out
    if fmt == "messages":
        texts, thinking = [], []
        for block in response.get("content") or []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text") or "")
            elif kind == "thinking":
                thinking.append(block.get("thinking") or "")
            elif kind == "redacted_thinking":
                thinking.append("[redacted thinking]")
            elif kind in ("tool_use", "server_tool_use"):
                out["tool_calls"].append({"id": block.get("id"), "name": block.get("name"),
                                          "arguments": block.get("input")})
        out.update(text="\n".join(texts), thinking="\n".join(thinking),
                   finish=response.get("stop_reason"))
    elif fmt == "responses":
        texts, thinking = [], []
        for item in response.get("output") or []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "message":
                texts.append(text_of(item.get("content")))
            elif kind == "reasoning":
                thinking.append(text_of(item.get("summary")) or text_of(item.get("content")))
            elif kind in RESPONSES_MODEL_ITEMS:
                out["tool_calls"].append({"id": item.get("call_id") or item.get("id"),
                                          "name": item.get("name") or kind,
                                          "arguments": item.get("arguments")
                                          or item.get("input") or item.get("action")})
        out.update(text="\n".join(t for t in texts if t), thinking="\n".join(thinking),
                   finish=response.get("status"))
    elif fmt == "gemini":
        candidate = (response.get("candidates") or [{}])[0] or {}
        texts, thinking = [], []
        for part in (candidate.get("content") or {}).get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                (thinking if part.get("thought") else texts).append(part["text"])
            call = part.get("functionCall")
            if isinstance(call, dict):
                out["tool_calls"].append({"id": call.get("id"), "name": call.get("name"),
                                          "arguments": call.get("args")})
        out.update(text="".join(texts), thinking="".join(thinking),
                   finish=candidate.get("finishReason"))
    else:  # chat
        choice = (response.get("choices") or [{}])[0] or {}
        message = choice.get("message") or {}
        out["text"] = text_of(message.get("content"))
        out["thinking"] = text_of(message.get("reasoning_content")
                                  or message.get("reasoning") or "")
        for call in message.get("tool_calls") or []:
            fn = (call or {}).get("function") or {}
            out["tool_calls"].append({"id": call.get("id"), "name": fn.get("name"),
                                      "arguments": fn.get("arguments")})
        out["finish"] = choice.get("finish_reason")
    return out


def _call_names(calls: list[dict[str, Any]]) -> dict[str, str]:
    return {str(c.get("id")): str(c.get("name")) for c in calls if c.get("id")}


def new_inputs(fmt: str | None, request: Any) -> list[dict[str, Any]]:
    """What the agent added since the model's previous turn: [{kind, text, tool?}].

    The first exchange has no earlier turn, so its system prompt and instruction come out.
    """
    if not isinstance(request, dict):
        return []
    out: list[dict[str, Any]] = []
    if fmt == "responses":
        raw = request.get("input")
        items = raw if isinstance(raw, list) else ([{"role": "user", "content": raw}]
                                                   if isinstance(raw, str) else [])
        last = max((i for i, it in enumerate(items) if _responses_model_item(it)), default=-1)
        names = {}
        for it in items[:last + 1]:
            if isinstance(it, dict) and it.get("type") in RESPONSES_MODEL_ITEMS:
                names[str(it.get("call_id") or it.get("id"))] = str(it.get("name"))
        if last < 0 and request.get("instructions"):
            out.append({"kind": "system", "text": text_of(request.get("instructions"))})
        for it in items[last + 1:]:
            if not isinstance(it, dict):
                continue
            kind = it.get("type", "message")
            if kind.endswith("_output"):
                cid = str(it.get("call_id"))
                out.append({"kind": "tool", "tool": {
                    "call_id": cid, "name": names.get(cid), "output": text_of(it.get("output"))}})
            elif kind == "message":
                role = it.get("role", "user")
                out.append({"kind": "system" if role in ("system", "developer") else "user",
                            "text": text_of(it.get("content"))})
        return out
    if fmt == "gemini":
        return _gemini_inputs(request)
    messages = request.get("messages")
    if not isinstance(messages, list):
        return []
    last = max((i for i, m in enumerate(messages)
                if isinstance(m, dict) and m.get("role") == "assistant"), default=-1)
    names: dict[str, str] = {}
    if last >= 0:
        prev = messages[last]
        if fmt == "messages":
            blocks = prev.get("content") if isinstance(prev.get("content"), list) else []
            names = {str(b.get("id")): str(b.get("name")) for b in blocks
                     if isinstance(b, dict) and b.get("type") == "tool_use"}
        else:
            names = _call_names([{"id": c.get("id"), "name": (c.get("function") or {}).get(
                "name")} for c in prev.get("tool_calls") or [] if isinstance(c, dict)])
    elif fmt == "messages" and request.get("system"):
        out.append({"kind": "system", "text": text_of(request.get("system"))})
    for m in messages[last + 1:]:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        content = m.get("content")
        if role == "tool":
            cid = str(m.get("tool_call_id"))
            out.append({"kind": "tool", "tool": {"call_id": cid, "name": names.get(cid),
                                                 "output": text_of(content)}})
        elif fmt == "messages" and role == "user" and isinstance(content, list):
            texts = []
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    cid = str(b.get("tool_use_id"))
                    out.append({"kind": "tool", "tool": {
                        "call_id": cid, "name": names.get(cid), "output": text_of(
                            b.get("content")), "is_error": bool(b.get("is_error"))}})
                else:
                    texts.append(text_of([b]))
            if any(t.strip() for t in texts):
                out.append({"kind": "user", "text": "\n".join(texts)})
        else:
            out.append({"kind": "system" if role in ("system", "developer") else "user",
                        "text": text_of(content)})
    return out


def _gemini_inputs(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Google's contents after the model's last turn: prompts and functionResponses."""
    contents = [c for c in request.get("contents") or [] if isinstance(c, dict)]
    last = max((i for i, c in enumerate(contents) if c.get("role") == "model"), default=-1)
    out: list[dict[str, Any]] = []
    if last < 0 and isinstance(request.get("systemInstruction"), dict):
        out.append({"kind": "system",
                    "text": text_of(request["systemInstruction"].get("parts"))})
    for content in contents[last + 1:]:
        texts = []
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            reply = part.get("functionResponse")
            if isinstance(reply, dict):
                payload = reply.get("response")
                out.append({"kind": "tool", "tool": {
                    "call_id": str(reply.get("id")), "name": reply.get("name"),
                    "output": response_text(payload),
                    "is_error": isinstance(payload, dict) and "error" in payload}})
            elif isinstance(part.get("text"), str):
                texts.append(part["text"])
        if any(t.strip() for t in texts):
            out.append({"kind": "user", "text": "\n".join(texts)})
    return out


def _responses_model_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    return kind in RESPONSES_MODEL_ITEMS or (kind == "message" and item.get("role") == "assistant")


# ---------------------------------------------------------------- steps


def _finish_step(step: dict[str, Any]) -> dict[str, Any]:
    """Cap the long texts of a step in place."""
    for key in ("text", "thinking"):
        if key in step and isinstance(step[key], str):
            cap(step, key, step[key])
    tool = step.get("tool")
    if tool:
        if "output" in tool and isinstance(tool["output"], str):
            cap(tool, "output", tool["output"])
        if "arguments" in tool and tool["arguments"] is not None:
            cap(tool, "arguments", _args_text(tool["arguments"]))
    calls = step.get("tool_calls")
    if calls:
        for c in calls:
            cap(c, "arguments", _args_text(c.get("arguments") or {}), TEXT_CAP)
    return step


class TrialTrajectory:
    """The steps of one trial, paged. Cheap to create; indexes are shared via the cache."""

    def __init__(self, trial_dir: Path, cache: IndexCache, *, full_text: bool = False) -> None:
        self.dir = trial_dir
        self.cache = cache
        #: Keep texts whole (exports) instead of capping them at TEXT_CAP (the viewer).
        self.full_text = full_text
        builtin = trial_dir / BUILTIN_LOG
        gateway = trial_dir / GATEWAY_LOG
        self.source = ("builtin" if builtin.is_file() else
                       "gateway" if gateway.is_file() else None)
        self._builtin = cache.get(builtin, _is_assistant_line) if self.source == "builtin" \
            else None
        self._gateway = cache.get(gateway) if gateway.is_file() else None

    def _finish(self, step: dict[str, Any]) -> dict[str, Any]:
        return step if self.full_text else _finish_step(step)

    @property
    def n_records(self) -> int:
        index = self._builtin if self.source == "builtin" else self._gateway
        return len(index) if index is not None else 0

    @property
    def n_exchanges(self) -> int:
        return len(self._gateway) if self._gateway is not None else 0

    def exchange_summaries(self, start: int, stop: int) -> list[dict[str, Any]]:
        if self._gateway is None:
            return []
        out = []
        for i in range(max(0, start), min(stop, len(self._gateway))):
            summary = self._summary(i)
            if summary is not None:
                out.append(summary)
        return out

    def _summary(self, i: int) -> dict[str, Any] | None:
        assert self._gateway is not None
        key = (self._gateway.path, i, self._gateway.size_of(i))
        hit = _summaries.get(key)
        if hit is not None:
            return hit
        raw = self._gateway.read(i, i + 1)
        rec = parse_line(raw[0]) if raw else None
        if rec is None:
            return None
        summary = exchange_summary(rec, i)
        _summaries.put(key, summary)
        return summary

    def exchange(self, i: int) -> dict[str, Any] | None:
        """One exchange for display: its facts, the new input, and the full response."""
        if self._gateway is None or not 0 <= i < len(self._gateway):
            return None
        rec = parse_line(self._gateway.read(i, i + 1)[0])
        if rec is None:
            return None
        request = rec.get("request") or {}
        params = {k: v for k, v in request.items()
                  if k not in ("messages", "input", "tools", "system", "instructions",
                                "contents", "systemInstruction")}
        tools = request.get("tools") or []
        return {
            "summary": exchange_summary(rec, i),
            "request_params": params,
            "tool_names": [(t.get("function") or t).get("name") for t in tools
                           if isinstance(t, dict)],
            "new_input": [self._finish(s) for s in new_inputs(rec.get("format"), request)],
            "response": rec.get("response"),
            "upstream_error": rec.get("upstream_error"),
        }

    def raw_line(self, source: str, i: int) -> bytes | None:
        index = self._builtin if source == "builtin" else self._gateway
        if index is None or not 0 <= i < len(index):
            return None
        return index.read(i, i + 1)[0]

    def steps(self, offset: int, limit: int) -> dict[str, Any]:
        limit = max(1, min(limit, MAX_PAGE))
        total = self.n_records
        offset = max(0, min(offset, total))
        if self.source == "builtin":
            steps = self._builtin_steps(offset, offset + limit)
        elif self.source == "gateway":
            steps = self._gateway_steps(offset, offset + limit)
        else:
            steps = []
        stop = min(total, offset + limit)
        return {"source": self.source, "total": total, "offset": offset,
                "next_offset": stop if stop < total else None, "steps": steps}

    def _builtin_steps(self, start: int, stop: int) -> list[dict[str, Any]]:
        index = self._builtin
        assert index is not None
        steps = []
        for j, raw in enumerate(index.read(start, stop)):
            i = start + j
            rec = parse_line(raw)
            if rec is None:
                steps.append({"i": str(i), "record": i, "kind": "note",
                              "text": "(unreadable line)"})
                continue
            if rec.get("type") == "assistant":
                if rec.get("turn") == 1:  # a new prompt: the instruction or repair feedback
                    steps += self._prompt_steps(i, index.tagged_before(i))
                message = rec.get("message") or {}
                out = assistant_output("chat", {"choices": [{
                    "message": message, "finish_reason": rec.get("finish_reason")}]})
                step = {"i": i, "record": i, "kind": "assistant", "t": rec.get("t"),
                        "turn": rec.get("turn"), "text": out["text"],
                        "thinking": out["thinking"], "tool_calls": out["tool_calls"],
                        "finish": out["finish"]}
                if self._gateway is not None:
                    summary = self._summary_at(index.tagged_before(i))
                    if summary is not None:
                        step["llm"] = summary
            elif rec.get("type") == "tool":
                step = {"i": i, "record": i, "kind": "tool", "t": rec.get("t"), "tool": {
                    "name": rec.get("name"), "arguments": rec.get("arguments"),
                    "output": rec.get("output"), "is_error": rec.get("is_error"),
                    "duration_sec": rec.get("duration_sec"),
                    "truncated_by_agent": rec.get("truncated")}}
            else:
                step = {"i": i, "record": i, "kind": "note", "t": rec.get("t"),
                        "text": json.dumps(rec)[:TEXT_CAP]}
            step["i"] = str(i)
            steps.append(self._finish(step))
        return steps

    def _prompt_steps(self, i: int, exchange: int) -> list[dict[str, Any]]:
        """The user message that started the prompt whose first turn is line `i`."""
        if self._gateway is None or exchange >= len(self._gateway):
            return []
        rec = parse_line(self._gateway.read(exchange, exchange + 1)[0])
        if rec is None:
            return []
        out = []
        for k, s in enumerate(new_inputs(rec.get("format"), rec.get("request"))):
            if s["kind"] in ("system", "user"):
                s.update(i=f"{i}.u{k}", record=i, t=rec.get("started_at"))
                out.append(self._finish(s))
        return out

    def _summary_at(self, i: int) -> dict[str, Any] | None:
        if self._gateway is None or i >= len(self._gateway):
            return None
        return self._summary(i)

    def _gateway_steps(self, start: int, stop: int) -> list[dict[str, Any]]:
        index = self._gateway
        assert index is not None
        steps: list[dict[str, Any]] = []
        for j, raw in enumerate(index.read(start, stop)):
            i = start + j
            rec = parse_line(raw)
            if rec is None:
                steps.append({"i": f"{i}.0", "record": i, "kind": "note",
                              "text": "(unreadable line)"})
                continue
            fmt = rec.get("format")
            group = new_inputs(fmt, rec.get("request"))
            out = assistant_output(fmt, rec.get("response"))
            group.append({"kind": "assistant", "text": out["text"], "thinking": out["thinking"],
                          "tool_calls": out["tool_calls"], "finish": out["finish"],
                          "llm": exchange_summary(rec, i)})
            for k, s in enumerate(group):
                s.update(i=f"{i}.{k}", record=i, t=rec.get("started_at"))
                steps.append(self._finish(s))
        return steps


# ---------------------------------------------------------------- file changes

PATH_KEYS = ("path", "file_path", "filePath", "absolute_path", "filename")
CONTENT_KEYS = ("content", "contents", "file_text")
EDIT_PAIRS = (("old_text", "new_text"), ("old_str", "new_str"), ("oldText", "newText"),
              ("old_string", "new_string"))
MAX_CHANGES = 300


def _arguments_dict(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return {"_raw": arguments} if "*** Begin Patch" in arguments else None
        return value if isinstance(value, dict) else None
    return None


def change_of(name: str | None, arguments: Any) -> list[dict[str, Any]]:
    """The file writes and edits a tool call makes, recognised by its argument names."""
    args = _arguments_dict(arguments)
    if args is None:
        return []
    for key in ("_raw", "input", "patch"):
        if isinstance(args.get(key), str) and "*** Begin Patch" in args[key]:
            return [{"kind": "patch", "path": None, "patch": args[key][:TEXT_CAP]}]
    path = next((str(args[k]) for k in PATH_KEYS if isinstance(args.get(k), str)), None)
    if path is None:
        return []
    import difflib

    def edit(old: str, new: str) -> dict[str, Any]:
        diff = "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                            new.splitlines(keepends=True),
                                            f"a{path}", f"b{path}", n=2))
        return {"kind": "edit", "path": path, "diff": diff[:TEXT_CAP]}

    out = []
    for old_key, new_key in EDIT_PAIRS:
        if isinstance(args.get(old_key), str) and isinstance(args.get(new_key), str):
            out.append(edit(args[old_key], args[new_key]))
    for e in args.get("edits") or [] if isinstance(args.get("edits"), list) else []:
        if isinstance(e, dict):
            for old_key, new_key in EDIT_PAIRS:
                if isinstance(e.get(old_key), str) and isinstance(e.get(new_key), str):
                    out.append(edit(e[old_key], e[new_key]))
    if out:
        return out
    content = next((args[k] for k in CONTENT_KEYS if isinstance(args.get(k), str)), None)
    if content is not None and args.get("command") not in ("view", "str_replace", "undo_edit"):
        step: dict[str, Any] = {"kind": "write", "path": path, "bytes": len(content.encode())}
        cap(step, "content", content)
        return [step]
    return []


def file_changes(traj: TrialTrajectory) -> dict[str, Any]:
    """Every write and edit made through the agent's file tools, in order (one full pass
    over the log, run only when asked for)."""
    changes: list[dict[str, Any]] = []
    more = False
    offset: int | None = 0
    while offset is not None and not more:
        page = traj.steps(offset, MAX_PAGE)
        for s in page["steps"]:
            calls = []
            if traj.source == "builtin" and s["kind"] == "tool":
                calls = [(s["tool"].get("name"), s["tool"].get("arguments"))]
            elif traj.source == "gateway" and s["kind"] == "assistant":
                calls = [(c.get("name"), c.get("arguments")) for c in s.get("tool_calls") or []]
            for name, arguments in calls:
                for change in change_of(name, arguments):
                    change.update(step=s["i"], tool=name)
                    changes.append(change)
            if len(changes) >= MAX_CHANGES:
                more = True
                break
        offset = page["next_offset"]
    return {"source": traj.source, "changes": changes[:MAX_CHANGES], "more": more}
