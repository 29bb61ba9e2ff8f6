"""sandlot: benchmark AI coding agents on Harbor-layout tasks in isolated sandboxes.

The public API is what `__all__` lists; everything else is implementation. The names are
imported on first use (PEP 562), so `sandlot --help` does not pay for pydantic's models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["ErrorKind", "JobConfig", "JobSummary", "TrialError", "TrialResult", "__version__"]

_LAZY = {"ErrorKind": "sandlot.errors", "TrialError": "sandlot.errors",
         "JobConfig": "sandlot.models", "JobSummary": "sandlot.models",
         "TrialResult": "sandlot.models"}

if TYPE_CHECKING:
    from sandlot.errors import ErrorKind, TrialError
    from sandlot.models import JobConfig, JobSummary, TrialResult


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandlot' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
