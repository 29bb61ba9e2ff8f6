"""Where trials run: the executor interface (base) and its implementations (local)."""

from sandlot.executors.base import ExecutorClosed, TrialExecutor, TrialRequest, TrialTicket
from sandlot.executors.local import LocalExecutor

__all__ = ["ExecutorClosed", "LocalExecutor", "TrialExecutor", "TrialRequest", "TrialTicket"]
