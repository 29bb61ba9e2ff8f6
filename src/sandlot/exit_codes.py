"""sandlot's exit codes: one table, used by the commands, their --help and docs/cli.md.

A script that runs a benchmark must tell "the job ran, here are its numbers" from "the job
could not start" and from "the numbers are not a benchmark result" without reading logs.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    #: The job ran to its end, whatever its pass rate. Other commands: done.
    OK = 0
    #: `tasks check` found an error; `clean` left a folder with a mount inside.
    CHECK_FAILED = 1
    #: The command line is wrong: a bad flag or value, conflicting flags, a path that is
    #: not there, a resumed job whose settings differ.
    USAGE = 2
    #: The command is right but cannot run here: a credential not set, a provider that
    #: refuses the key or does not know the model, no tasks selected, an agent that cannot
    #: be installed, a sandbox backend that cannot run. Nothing was started or written.
    PREFLIGHT = 3
    #: The job ran, but more of its trials ended in errors than --max-error-rate allows:
    #: its figures are not a benchmark result.
    TOO_MANY_ERRORS = 4
    #: The provider refused the key or does not serve the model mid-run: the job stopped
    #: launching trials; those it cut short are `provider_error`. Fix, then resume.
    PROVIDER_FAILED = 5
    #: The job's budget (--max-job-tokens / --max-job-cost-usd) was spent: no trial started
    #: after, the running ones were stopped (`cancelled`). Raise it, then resume.
    BUDGET_REACHED = 6
    #: Interrupted (Ctrl-C, SIGTERM) after cleaning up; run the same command to resume.
    INTERRUPTED = 130


#: The run command's --help epilog and docs/cli.md's table say the same.
RUN_EXIT_CODES = (
    (ExitCode.OK, "the job ran to its end, whatever its pass rate"),
    (ExitCode.USAGE, "bad command line: a flag, a value, a path, a resumed job's settings"),
    (ExitCode.PREFLIGHT, "cannot run here: a credential, the provider, no tasks, the agent "
                         "install or the sandbox backend; nothing was started"),
    (ExitCode.TOO_MANY_ERRORS, "the job ran but more trials errored than --max-error-rate"),
    (ExitCode.PROVIDER_FAILED, "the provider refused the key or the model mid-run: the job "
                               "stopped early; fix it and run again to resume"),
    (ExitCode.BUDGET_REACHED, "the job's budget was spent: the job stopped early; raise "
                              "it and run again to resume"),
    (ExitCode.INTERRUPTED, "interrupted (Ctrl-C, SIGTERM); run again to resume"),
)


def run_epilog() -> str:
    """The exit-code table for `sandlot run --help` (one paragraph per code)."""
    return "Exit codes:\n\n" + "\n\n".join(f"{int(code)}: {text}"
                                           for code, text in RUN_EXIT_CODES)
