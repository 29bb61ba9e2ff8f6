#!/usr/bin/env python3
"""A small ACP agent for tests: standard library only, one JSON-RPC message per line.

It runs inside the sandbox and drives the client side of sandlot's ACP client through
every method (fs, terminal, permission), plus the ways real agents misbehave. What it
does on a prompt is the prompt's text, a JSON object:

    {"results": "/tmp/probe.json", "steps": [{"do": "read", "path": "/app/x"}, ...]}

Each step's answer (the client's result or error) is appended to `results`, a JSON file
written by this process itself, which the test reads back from the sandbox.

Steps: read {path, line?, limit?}; write {path, content}; terminal {command, args?, env?,
cwd?, limit?, wait?, kill?, release?, output?, sleep_before_output?}; raw {method,
params} (any request); permission {title, kind?}; tool {id, title, kind?, status?};
say {text}; think {text}; sleep {seconds} (ends early, `cancelled`, on session/cancel
unless --ignore-cancel); big {bytes}; garbage; unknown_update; usage {input, output};
exit {code, stderr?}.

Flags: --hang-initialize (never answer initialize), --crash-on-start (write to stderr,
exit 3), --auth-required (session/new fails until authenticate), --no-exit-on-eof
(keep running when stdin closes), --ignore-cancel, --model-option (offer a `model`
config option), --stop-reason R.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time

ARGS = set(sys.argv[1:])
STOP_REASON = "end_turn"
for i, a in enumerate(sys.argv):
    if a == "--stop-reason":
        STOP_REASON = sys.argv[i + 1]

OUT_LOCK = threading.Lock()
INBOX: queue.Queue = queue.Queue()   # requests and notifications for the main loop
REPLIES: dict[int, queue.Queue] = {}  # our requests' ids -> where their answer goes
CANCELLED = threading.Event()
NEXT_ID = [1000]


def send(message: dict) -> None:
    with OUT_LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def raw_line(text: str) -> None:
    with OUT_LOCK:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def request(method: str, params: dict, timeout: float = 60) -> dict:
    """Call the client; returns {"result": ...} or {"error": ...}."""
    NEXT_ID[0] += 1
    rid = NEXT_ID[0]
    box: queue.Queue = queue.Queue()
    REPLIES[rid] = box
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    try:
        reply = box.get(timeout=timeout)
    except queue.Empty:
        return {"error": {"message": "no answer"}}
    return {k: reply[k] for k in ("result", "error") if k in reply}


def update(session: str, body: dict) -> None:
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": session, "update": body}})


def reader() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        if "method" not in message and message.get("id") in REPLIES:
            REPLIES.pop(message["id"]).put(message)
        elif message.get("method") == "session/cancel":
            CANCELLED.set()
            INBOX.put(message)
        else:
            INBOX.put(message)
    INBOX.put(None)  # EOF


def run_steps(session: str, spec: dict) -> tuple[str, dict | None]:
    results: list = []
    usage = None
    path = spec.get("results", "/tmp/probe-results.json")

    def save() -> None:
        with open(path, "w") as fh:
            json.dump(results, fh)

    for step in spec.get("steps", []):
        do = step["do"]
        if do == "read":
            params = {"sessionId": session, "path": step["path"]}
            for key in ("line", "limit"):
                if key in step:
                    params[key] = step[key]
            results.append(request("fs/read_text_file", params))
        elif do == "write":
            results.append(request("fs/write_text_file", {
                "sessionId": session, "path": step["path"], "content": step["content"]}))
        elif do == "raw":
            results.append(request(step["method"], step["params"]))
        elif do == "terminal":
            params = {"sessionId": session, "command": step["command"]}
            for key, wire in (("args", "args"), ("cwd", "cwd"), ("limit", "outputByteLimit")):
                if key in step:
                    params[wire] = step[key]
            if "env" in step:
                params["env"] = [{"name": k, "value": v} for k, v in step["env"].items()]
            created = request("terminal/create", params)
            record = {"create": created}
            tid = (created.get("result") or {}).get("terminalId")
            if tid:
                ref = {"sessionId": session, "terminalId": tid}
                if step.get("sleep_before_output"):
                    time.sleep(step["sleep_before_output"])
                if step.get("output"):
                    record["output_early"] = request("terminal/output", ref)
                if step.get("kill"):
                    record["kill"] = request("terminal/kill", ref)
                if step.get("wait", True):
                    record["wait"] = request("terminal/wait_for_exit", ref)
                record["output"] = request("terminal/output", ref)
                if step.get("release", True):
                    record["release"] = request("terminal/release", ref)
                    record["after_release"] = request("terminal/output", ref)
            results.append(record)
        elif do == "permission":
            options = step.get("options") or [
                {"optionId": "yes-always", "name": "Always", "kind": "allow_always"},
                {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
            results.append(request("session/request_permission", {
                "sessionId": session, "options": options,
                "toolCall": {"toolCallId": step.get("id", "perm-1"),
                             "title": step.get("title", "Run it")}}))
        elif do == "tool":
            body = {"sessionUpdate": step.get("update", "tool_call"),
                    "toolCallId": step["id"], "title": step.get("title", "tool"),
                    "kind": step.get("kind", "execute"), "status": step.get("status", "pending")}
            update(session, body)
            results.append({"sent": body})
        elif do == "say":
            update(session, {"sessionUpdate": "agent_message_chunk",
                             "content": {"type": "text", "text": step["text"]}})
        elif do == "think":
            update(session, {"sessionUpdate": "agent_thought_chunk",
                             "content": {"type": "text", "text": step["text"]}})
        elif do == "usage_update":
            update(session, {"sessionUpdate": "usage_update", "used": step["used"],
                             "size": step["size"], "cost": {"amount": 0.5, "currency": "USD"}})
        elif do == "sleep":
            save()
            deadline = time.monotonic() + step["seconds"]
            while time.monotonic() < deadline:
                if CANCELLED.is_set() and "--ignore-cancel" not in ARGS:
                    return "cancelled", None
                time.sleep(0.05)
        elif do == "big":
            update(session, {"sessionUpdate": "agent_message_chunk",
                             "content": {"type": "text", "text": "x" * step["bytes"]}})
        elif do == "garbage":
            raw_line("this is not JSON-RPC")
        elif do == "unknown_update":
            update(session, {"sessionUpdate": "brand_new_kind", "whatever": 1})
        elif do == "usage":
            usage = {"inputTokens": step["input"], "outputTokens": step["output"],
                     "totalTokens": step["input"] + step["output"]}
        elif do == "exit":
            save()
            sys.stderr.write(step.get("stderr", "probe: exiting on purpose") + "\n")
            sys.stderr.flush()
            os._exit(step.get("code", 1))
        save()
    return STOP_REASON, usage


def main() -> None:
    if "--crash-on-start" in ARGS:
        sys.stderr.write("probe: cannot start: missing configuration PROBE_CONFIG\n")
        sys.exit(3)
    threading.Thread(target=reader, daemon=True).start()
    authenticated = "--auth-required" not in ARGS
    sessions = 0
    while True:
        message = INBOX.get()
        if message is None:
            if "--no-exit-on-eof" in ARGS:
                while True:
                    time.sleep(1)
            return
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            if "--hang-initialize" in ARGS:
                continue
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                "authMethods": [{"id": "login", "name": "Log in"},
                                {"id": "api-key", "name": "API key from env"}],
                "agentInfo": {"name": "probe", "version": "1.0"}}})
        elif method == "authenticate":
            authenticated = True
            with open("/tmp/probe-auth.txt", "w") as fh:
                fh.write(params.get("methodId", ""))
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "session/new":
            if not authenticated:
                send({"jsonrpc": "2.0", "id": rid,
                      "error": {"code": -32000, "message": "Authentication required"}})
                continue
            sessions += 1
            result = {"sessionId": f"probe-session-{sessions}"}
            if "--model-option" in ARGS:
                result["configOptions"] = [{
                    "id": "model", "name": "Model", "category": "model", "type": "select",
                    "currentValue": "probe-default",
                    "options": [{"value": "probe-default", "name": "Default"},
                                {"value": "scripted/probe", "name": "The job's model"}]}]
            with open("/tmp/probe-env.json", "w") as fh:
                json.dump({"cwd": params.get("cwd"), "env": dict(os.environ)}, fh)
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "session/set_config_option":
            with open("/tmp/probe-model.txt", "w") as fh:
                fh.write(str(params.get("value")))
            send({"jsonrpc": "2.0", "id": rid, "result": {"configOptions": []}})
        elif method == "session/prompt":
            CANCELLED.clear()
            text = "".join(b.get("text", "") for b in params.get("prompt", []))
            with open("/tmp/probe-prompts.txt", "a") as fh:
                fh.write(json.dumps({"session": params.get("sessionId"), "text": text}) + "\n")
            try:
                spec = json.loads(text)
            except ValueError:
                spec = {"steps": [{"do": "say", "text": f"got: {text[:200]}"}]}
            if not isinstance(spec, dict):
                spec = {"steps": []}

            session_id = params.get("sessionId")

            def work(rid=rid, session=session_id, spec=spec) -> None:
                stop, usage = run_steps(session, spec)
                result = {"stopReason": stop}
                if usage:
                    result["usage"] = usage
                send({"jsonrpc": "2.0", "id": rid, "result": result})

            threading.Thread(target=work, daemon=True).start()
        elif method == "session/cancel":
            pass
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
