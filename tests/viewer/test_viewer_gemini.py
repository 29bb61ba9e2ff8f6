"""Google-format exchanges (gemini-cli) read as steps like the other formats."""

from __future__ import annotations

from sandlot.viewer.trajectory import assistant_output, exchange_summary, new_inputs

REQUEST = {
    "systemInstruction": {"parts": [{"text": "You are a CLI agent."}]},
    "contents": [
        {"role": "user", "parts": [{"text": "context"}, {"text": "Fix the bug."}]},
        {"role": "model", "parts": [{"functionCall": {
            "id": "c1", "name": "run_shell_command", "args": {"command": "ls"}}}]},
        {"role": "user", "parts": [{"functionResponse": {
            "id": "c1", "name": "run_shell_command", "response": {"output": "a.py\n"}}}]},
    ],
}
RESPONSE = {"candidates": [{"content": {"role": "model", "parts": [
    {"text": "Look closer.", "thought": True}, {"text": "Reading a.py."},
    {"functionCall": {"id": "c2", "name": "read_file", "args": {"file_path": "a.py"}}}]},
    "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 10}}


def test_a_gemini_answer_has_text_thinking_and_calls() -> None:
    out = assistant_output("gemini", RESPONSE)
    assert out["text"] == "Reading a.py." and out["thinking"] == "Look closer."
    assert out["tool_calls"] == [{"id": "c2", "name": "read_file",
                                  "arguments": {"file_path": "a.py"}}]
    assert out["finish"] == "STOP"


def test_gemini_inputs_after_the_last_model_turn_are_tool_results() -> None:
    assert new_inputs("gemini", REQUEST) == [{"kind": "tool", "tool": {
        "call_id": "c1", "name": "run_shell_command", "output": "a.py\n", "is_error": False}}]
    first = {**REQUEST, "contents": REQUEST["contents"][:1]}
    assert new_inputs("gemini", first) == [
        {"kind": "system", "text": "You are a CLI agent."},
        {"kind": "user", "text": "context\nFix the bug."}]
    summary = exchange_summary({"format": "gemini", "request": REQUEST}, 0)
    assert summary["n_messages"] == 3
