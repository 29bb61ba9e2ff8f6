"""Repair feedback: what the verifier said, trimmed, without the tests' or solution's text.

Between repair attempts the agent hears which checks failed and how, never the source of
tests/ or solution/: any output line that repeats a line of those files verbatim (pytest
shows failing test code in its tracebacks) is replaced by a marker.
"""

from __future__ import annotations

import string
from pathlib import Path

from sandlot.verify import Verdict

DEFAULT_TEMPLATE = (
    "Your work was checked and the task is not complete yet (score {reward:.2f} of 1.00; "
    "attempt {attempt} of {max_attempts}). What the checks reported:\n\n{feedback}\n\n"
    "Fix the remaining problems, then finish."
)
MAX_FEEDBACK_CHARS = 4000
MIN_LINE_CHARS = 8
HIDDEN = "[line from the tests hidden]"


def _secret_lines(folders: list[Path]) -> set[str]:
    lines: set[str] = set()
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            if not path.is_file() or path.stat().st_size > 2_000_000:
                continue
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            lines.update(s for line in text.split("\n")
                         if len(s := line.strip()) >= MIN_LINE_CHARS)
    return lines


def filter_output(output: str, secret_folders: list[Path],
                  limit: int = MAX_FEEDBACK_CHARS) -> str:
    """The verifier's output with tests/solution lines hidden, trimmed to its last `limit`."""
    secrets = _secret_lines(secret_folders)
    kept: list[str] = []
    for line in output.split("\n"):
        stripped = line.strip()
        # pytest prefixes source lines with ">" or a line number; compare without them.
        candidate = stripped.lstrip(">").strip()
        head, sep, rest = candidate.partition(" ")
        if sep and head.rstrip(":").isdigit():
            candidate = rest.strip()
        if candidate in secrets or stripped in secrets:
            if not kept or kept[-1] != HIDDEN:
                kept.append(HIDDEN)
            continue
        kept.append(line)
    text = "\n".join(kept).strip()
    if len(text) > limit:
        text = "[…earlier output trimmed…]\n" + text[-limit:]
    return text or "(the checks printed nothing)"


def render_feedback(template: str, verdict: Verdict, attempt: int, max_attempts: int,
                    secret_folders: list[Path]) -> str:
    """Fill a template: {feedback}, {reward}, {attempt}, {max_attempts} (str.format)."""
    feedback = filter_output(verdict.output, secret_folders)
    values = {"feedback": feedback, "reward": verdict.reward, "attempt": attempt,
              "max_attempts": max_attempts}
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f]
        raise ValueError(f"bad repair feedback template ({exc}); it may use {{feedback}}, "
                         f"{{reward}}, {{attempt}}, {{max_attempts}}, got fields {fields}") from exc
