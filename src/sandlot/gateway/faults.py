"""What a provider's error answer means for the job: one classification, used by the
preflight check before any trial and by the gateway during the run.

A 401 is not a 500: a rejected key or an unknown model fails every request the same way,
so the job should stop and say so, while a rate limit or an outage passes with time.
"""

from __future__ import annotations

import re
from typing import Literal

#: `auth`: the key is missing, wrong or not allowed (401, 403). `unknown_model`: the
#: provider does not serve this model (404, or a 400 that says so). `rate_limited`: 429.
#: `unavailable`: the provider or the way to it is failing (5xx, no connection).
#: `bad_request`: any other 4xx (usually the agent's request, not the setup).
ProviderFault = Literal["auth", "unknown_model", "rate_limited", "unavailable", "bad_request"]

#: Faults that no retry and no other request can fix: the job stops on them.
FATAL_FAULTS: frozenset[ProviderFault] = frozenset({"auth", "unknown_model"})

_UNKNOWN_MODEL = re.compile(
    r"model[^\n]{0,80}?(not[ _]found|does not exist|is not a valid model|no such|"
    r"is not served)|(unknown|invalid|unsupported|no such)[ _]model|model_not_found|"
    r"NotFoundError", re.IGNORECASE)
_AUTH = re.compile(r"AuthenticationError|PermissionDeniedError|invalid[ _]api[ _]key|"
                   r"incorrect api key|unauthori[sz]ed|api key not valid", re.IGNORECASE)
#: The agent's request was too long for the model: its own problem, whatever else it says.
_AGENTS_OWN = re.compile(r"context[ _](length|window)|maximum context|too many tokens|"
                         r"prompt is too long", re.IGNORECASE)


def classify(status: int, error_text: str = "") -> ProviderFault | None:
    """The kind of fault an answer with `status` (and its error text) is; None for success.

    Providers disagree on status codes: some answer an unknown model with 400 and the
    words "model not found", and LiteLLM's error names its class (`NotFoundError`), so
    the text is read when the status alone is ambiguous.
    """
    if status < 400:
        return None
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "unknown_model"
    if status == 429:
        return "rate_limited"
    if status >= 500 or status in (408, 409):
        return "unavailable"
    if _AGENTS_OWN.search(error_text):
        return "bad_request"
    if _AUTH.search(error_text):
        return "auth"
    if _UNKNOWN_MODEL.search(error_text):
        return "unknown_model"
    return "bad_request"


def describe(fault: ProviderFault, status: int, model: str, key_env: str | None) -> str:
    """One line for a user: what the provider said and what to change."""
    if fault == "auth":
        key = f"{key_env}" if key_env else "the provider key"
        return (f"the provider refused the key for {model} (HTTP {status}): check {key} "
                "(or --api-key-env)")
    if fault == "unknown_model":
        return (f"the provider does not serve {model} (HTTP {status}): check the model name "
                "after the provider prefix (and --api-base)")
    if fault == "rate_limited":
        return f"the provider is rate limiting {model} (HTTP {status})"
    if fault == "unavailable":
        return f"the provider failed to answer for {model} (HTTP {status})"
    return f"the provider refused a request for {model} (HTTP {status})"
