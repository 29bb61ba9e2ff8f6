"""sandlot: benchmark AI coding agents on Harbor-layout tasks in isolated sandboxes.

The public API is what `__all__` lists; everything else is implementation.
"""

from sandlot.errors import ErrorKind, TrialError
from sandlot.models import JobConfig, JobSummary, TrialResult

__version__ = "0.1.0"

__all__ = ["ErrorKind", "JobConfig", "JobSummary", "TrialError", "TrialResult", "__version__"]
