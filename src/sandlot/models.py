"""Pydantic models for the files sandlot writes and reads: job config, trial result, summary.

Field names here are a contract with other tools (viewers, notebooks); rename nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from sandlot.errors import AGENT_FAULT_KINDS, Cause, ErrorKind

SCHEMA_VERSION = 1

AgentNetwork = Literal["none", "public"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


#: JobConfig settings a resumed job may change without changing what it measures.
#: task_paths: where the same tasks sit (task_digests and task_sources check they are).
RESUMABLE_SETTINGS: frozenset[str] = frozenset(
    {"n_concurrent", "max_retries", "jobs_dir", "task_paths", "max_job_tokens",
     "max_job_cost_usd", "ray"})


class TaskSource(BaseModel):
    """Where a task came from when a dataset named it (`-d NAME[@VERSION]`): enough to
    fetch exactly the same files again, and to tell two results' tasks apart."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(description="The dataset's name in its registry.")
    version: str = Field(description="The dataset's version that ran.")
    version_from: Literal["given", "newest"] = Field(
        description="`given` (NAME@VERSION) or `newest` (NAME alone: the newest was taken).")
    registry: str = Field(description="The registry (URL or file) that answered for it.")
    task: str = Field(description="The task's name in the registry.")
    git_url: str | None = Field(
        default=None, description="The task's repository; null for a folder on this machine.")
    git_commit_id: str | None = Field(
        default=None, description="The full id of the commit the task's files came from.")
    path: str = Field(description="The task's folder inside its repository.")


class JobConfig(BaseModel):
    """Everything that decides what a job runs; stored as jobs/<job>/config.json."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    job_name: str = Field(description="Folder name under jobs_dir; reuse it to resume.")
    tasks_dir: str | None = Field(
        default=None, description="Absolute path of the (first) folder of tasks given; "
        "null when every task came from a dataset.")
    task_paths: dict[str, str] = Field(
        default_factory=dict, description="Each task's folder (absolute): in a folder "
        "given, or in the dataset cache.")
    task_sources: dict[str, TaskSource] = Field(
        default_factory=dict, description="Each task a dataset named: where it came from.")
    task_names: list[str] = Field(description="Tasks selected after include/exclude/n_tasks.")
    agent: str = Field(description="Agent name from the registry, or module:Class.")
    agent_version: str | None = Field(
        default=None, description="Pinned version for agents sandlot installs (pi, acp...).")
    model: str | None = Field(default=None, description="provider/model, routed by the gateway.")
    api_base: str | None = Field(default=None, description="Provider base URL override.")
    max_turns: int | None = Field(default=None, ge=1, description="Model turns per prompt cap.")
    repair_attempts: int = Field(default=0, ge=0, description="Feedback rounds after the first.")
    redact_env: list[str] = Field(
        default_factory=list, description="Env vars whose values are scrubbed from jobs/.")
    repair_template: str | None = Field(
        default=None, description="Run-wide repair feedback template (a task's own wins).")
    n_attempts: int = Field(default=1, ge=1, description="Trials per task (the k of pass@k).")
    n_concurrent: int = Field(default=1, ge=1, description="Trials running at once.")
    max_retries: int = Field(default=0, ge=0, description="Extra tries for infra errors.")
    timeout_multiplier: float = Field(default=1.0, gt=0, description="Scales every timeout.")
    override_cpus: float | None = Field(
        default=None, gt=0, description="CPUs for every task's sandbox, instead of its own.")
    override_memory_mb: int | None = Field(
        default=None, ge=16, description="Memory limit (MB) for every task, instead of its own.")
    override_storage_mb: int | None = Field(
        default=None, ge=16, description="Disk quota (MB) for every task, instead of its own.")
    agent_network: AgentNetwork | None = Field(
        default=None, description="Override the agent phase network; None = task's choice."
    )
    allow_private_network: bool = Field(
        default=False, description="Outbound phases may reach private ranges (a LAN mirror); "
        "the host's own addresses and link-local stay out of reach.")
    sandbox: str = Field(default="local", description="Sandbox backend name.")
    ray: str | None = Field(default=None, description="--ray: the Ray cluster the trials ran "
                            "on (local, auto or an address); null for this machine alone.")
    max_copy_out_mb: int = Field(
        default=100, ge=1, description="The most of the agent's files (workspace diff, "
        "/logs/agent, /logs/verifier) copied into each trial's folder; the rest is listed "
        "as left out.")
    verifier_mode: Literal["task", "separate"] = Field(
        default="task", description="Where tests run: as each task says (`[verifier] "
        "environment_mode`), or `separate` for every task (a fresh sandbox holding only the "
        "agent's outputs).")
    jobs_dir: str = Field(description="Absolute path of the jobs folder.")
    max_trial_tokens: int | None = Field(
        default=None, ge=1, description="Each trial's token budget (input + output), "
        "enforced by the gateway; reaching it ends the trial as budget_exceeded.")
    max_trial_cost_usd: float | None = Field(
        default=None, gt=0, description="Each trial's budget in USD (LiteLLM's prices).")
    max_job_tokens: int | None = Field(
        default=None, ge=1, description="The job's token budget: reaching it stops the job "
        "(a resume may raise it).")
    max_job_cost_usd: float | None = Field(
        default=None, gt=0, description="The job's budget in USD (a resume may raise it).")
    generation: dict[str, object] = Field(
        default_factory=dict, description="Generation settings set on every model request "
        "(temperature, max_output_tokens, reasoning_effort, seed, model_kwargs); empty: the "
        "agents' own.")
    task_digests: dict[str, str] = Field(
        default_factory=dict, description="Content digest of each task folder, to spot edits.")


class ErrorInfo(BaseModel):
    kind: ErrorKind
    message: str
    phase: str | None = None
    caused_by: Cause | None = Field(
        default=None, description="Whose fault: `agent`, `task` (its files or "
        "environment; for a verifier that cannot score, confirmed on a pristine sandbox), "
        "`sandlot` (the harness or the machine; retried), `user` (cancelled) or `provider` "
        "(the model's API refused the key or the model).")


IntegrityStatus = Literal["clean", "neutralized", "tampered"]


class Integrity(BaseModel):
    """What sandlot checked of the agent's doing before scoring, and what it found.

    `tampered` fails the trial closed (reward 0, a failure, never an error): what the agent
    left could not be vouched for. `neutralized` scored the trial after undoing hooks the
    agent planted for the verifier. `caps_hit` names each copy-out cap that cut what the
    trial folder keeps (the workspace diff, the agent's or the verifier's logs): the
    score stands, the evidence is partial.
    """

    status: IntegrityStatus = Field(
        default="clean", description="`clean`, `neutralized` (hooks undone, then scored) "
        "or `tampered` (scored 0 without trusting what the agent left).")
    reason: str | None = Field(default=None, description="Why `tampered`.")
    paths: list[str] = Field(
        default_factory=list, description="The sandbox paths `reason` is about.")
    neutralized: list[dict[str, str]] = Field(
        default_factory=list, description="Each hook undone: `path`, `reason`, `action`.")
    caps_hit: list[str] = Field(
        default_factory=list, description="Copy-out caps that cut what the trial folder "
        "keeps, each with where the left-out part is listed.")

    @model_validator(mode="before")
    @classmethod
    def _status_of_older_results(cls, data: object) -> object:
        """Results written before the block had a status: `{"neutralized": [...]}`."""
        if isinstance(data, dict) and "status" not in data:
            return {**data, "status": "neutralized" if data.get("neutralized") else "clean"}
        return data


def is_scored(kind: ErrorKind | None, phase: str | None, reward: float | None) -> bool:
    """A trial counts as passed/failed when it has a reward and no harness-side error."""
    if reward is None:
        return False
    return kind is None or (kind in AGENT_FAULT_KINDS and phase == "agent")


#: How far an agent's self-reported token total may stray from the gateway's count,
#: relative to the gateway's, before `usage_mismatch` flags the trial.
USAGE_TOLERANCE_RATIO = 0.05


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _tokens_view(usage: dict[str, object]) -> dict[str, object]:
    view: dict[str, object] = {k: _int_or_none(usage.get(k)) or 0
                               for k in ("input_tokens", "output_tokens", "total_tokens")}
    if usage.get("source") is not None:
        view["source"] = usage["source"]
    return view


def self_reported_usage(agent_info: dict[str, object],
                        attempts: list[dict[str, object]]) -> dict[str, object] | None:
    """The agent's own token count over the whole trial (every repair generation), if any.

    Agents put it in `agent_info["self_reported_usage"]` (the first generation) and in each
    repair attempt's `generation`; the sum covers the session, like the gateway's count.
    """
    gens = [a.get("generation") for a in attempts] if attempts else [agent_info]
    reports = [g["self_reported_usage"] for g in gens
               if isinstance(g, dict) and isinstance(g.get("self_reported_usage"), dict)]
    if not reports:
        return None
    out: dict[str, object] = {k: sum(_int_or_none(r.get(k)) or 0 for r in reports)
                              for k in ("input_tokens", "output_tokens", "total_tokens")}
    sources = {str(r["source"]) for r in reports if r.get("source") is not None}
    if sources:
        out["source"] = ", ".join(sorted(sources))
    return out


class StepResult(BaseModel):
    """One step of a multi-step trial (result.json `steps`); its files are in
    steps/<name>/ of the trial folder (agent/, verifier/, repairs/)."""

    name: str
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    passed: bool = False
    error: ErrorInfo | None = Field(
        default=None, description="What went wrong in this step (its agent's fault, or "
        "why it could not be scored).")
    timing: dict[str, float] = Field(default_factory=dict, description="Seconds per phase.")
    agent_exit_code: int | None = None
    verifier_exit_code: int | None = None
    agent_info: dict[str, object] = Field(default_factory=dict)
    attempts: list[dict[str, object]] = Field(default_factory=list)
    repaired: bool = False
    integrity: Integrity | None = None
    verifier_failure: dict[str, object] | None = None
    network: dict[str, object] | None = None
    artifacts: list[dict[str, object]] | None = None


class MultiStep(BaseModel):
    """How a multi-step trial's steps went (result.json `multi_step`)."""

    strategy: Literal["mean", "final"] = Field(
        description="multi_step_reward_strategy: how the trial's reward was made.")
    n_steps: int
    n_run: int = Field(description="Steps that ran (the rest were stopped).")
    stopped_after: str | None = Field(
        default=None, description="The step after which the rest were stopped, or null.")
    stop_reason: str | None = None


class TrialResult(BaseModel):
    """One trial's outcome: jobs/<job>/<task>__<attempt>/result.json."""

    schema_version: int = SCHEMA_VERSION
    trial_name: str
    task: str
    attempt: int
    agent: str
    model: str | None = None
    reward: float | None = Field(default=None, description="Headline reward, null if none.")
    rewards: dict[str, float] = Field(default_factory=dict)
    passed: bool = False
    error: ErrorInfo | None = None
    timing: dict[str, float] = Field(default_factory=dict, description="Seconds per phase.")
    script_time_sec: float = Field(
        default=0.0, description="Time spent in the task's own scripts (build, agent, tests)."
    )
    tries: int = Field(default=1, description="How many tries this result took (retries + 1).")
    started_at: str = Field(default_factory=utc_now)
    finished_at: str | None = None
    task_digest: str | None = None
    task_source: TaskSource | None = Field(
        default=None, description="The dataset, registry, repository, commit and path the "
        "task came from; null for a task from a folder.")
    sandbox: str = "local"
    node: str | None = Field(
        default=None, description="The Ray cluster node that ran the trial (`--ray`); null "
        "for a trial run by this machine's own pool.")
    requeued: list[dict[str, object]] = Field(
        default_factory=list, description="`--ray`: each node this try was running on when "
        "the node left the cluster (`node`, `reason`, `at`, the `phase` it had reached, the "
        "gateway `usage` last reported from it); the try was run again from the start on "
        "another node. Not counted in `tries`.")
    verifier_mode: Literal["shared", "separate"] = Field(
        default="shared", description="Where the tests ran: in the agent's sandbox "
        "(`shared`), or in a fresh one holding only the agent's outputs (`separate`).")
    environment: dict[str, str] | None = Field(
        default=None, description="What the sandbox's root was: `base` image (with `image` "
        "and its manifest `digest`), host (this machine's root) or host-fallback (the image "
        "could not be pulled: `reason`; `python`, the Python that ran for a python: image).")
    network: dict[str, object] | None = Field(
        default=None, description="Each phase's network: mode, where it was decided, an "
        "allowlist's hosts and the addresses its names had when the trial started.")
    agent_exit_code: int | None = Field(default=None, description="Exit code of the agent.")
    verifier_exit_code: int | None = Field(default=None, description="Exit code of test.sh.")
    usage: dict[str, object] | None = Field(
        default=None, description="Token usage and cost counted by the gateway (trusted).")
    retried_usage: dict[str, object] | None = Field(
        default=None, description="Gateway usage of this trial's earlier tries that ended in "
        "a retried infrastructure error (their files are in retries/try-N/); spent, but not "
        "part of `usage`, which is this result's own.")
    agent_info: dict[str, object] = Field(
        default_factory=dict, description="What the agent reported: turns, tool calls...")
    generation: dict[str, object] | None = Field(
        default=None, description="Generation settings: `settings` (the job's flags, set on "
        "every request), `agent_sent` (each distinct value the agent's requests carried, by "
        "setting), `n_requests_changed`, and `not_sent` (settings the agent's wire format "
        "has no field for). Null for a trial without model requests.")
    attempts: list[dict[str, object]] = Field(
        default_factory=list,
        description="Repair attempts: each generation, its feedback evaluation, the feedback.")
    repaired: bool = Field(default=False, description="Passed after at least one repair.")
    integrity: Integrity | None = Field(
        default=None, description="What sandlot checked of the agent's doing before "
        "scoring (see `Integrity`); null when the trial ended before it was checked.")
    verifier_failure: dict[str, object] | None = Field(
        default=None, description="The verifier could not score what the agent left "
        "(`kind`, `message`) but scored a pristine sandbox of the same environment "
        "(`pristine_reward`): the agent's changes broke it, so the trial is the agent's "
        "failure (reward 0), not an error.")
    counted_attempt: int | None = Field(
        default=None, description="The attempt whose final state the reward scores.")
    artifacts: list[dict[str, object]] | None = Field(
        default=None, description="What each `artifacts` entry gave (source, destination "
        "in the trial folder, type, status, bytes), as artifacts/manifest.json lists it; "
        "null when nothing was collected.")
    steps: list[StepResult] | None = Field(
        default=None, description="A multi-step task's steps that ran, in order.")
    multi_step: MultiStep | None = None

    @computed_field(description=(
        "The trial's two token figures side by side: `trusted` names the one in `usage` "
        "and the totals (the gateway's; null without gateway usage), `gateway` and "
        "`self_reported` hold input/output/total tokens from each (null when absent), "
        "`difference_ratio` is (self-reported - gateway) / gateway."))
    @property
    def usage_source(self) -> dict[str, object] | None:
        gateway = _tokens_view(self.usage) if self.usage else None
        reported = self_reported_usage(self.agent_info, self.attempts)
        if gateway is None and reported is None:
            return None
        ratio = None
        if gateway is not None and reported is not None:
            g, r = int(gateway["total_tokens"]), int(reported["total_tokens"])  # type: ignore[call-overload]
            ratio = round((r - g) / g, 6) if g else (0.0 if r == 0 else None)
        return {"trusted": "gateway" if gateway is not None else None, "gateway": gateway,
                "self_reported": reported, "difference_ratio": ratio,
                "tolerance_ratio": USAGE_TOLERANCE_RATIO}

    @computed_field(description=(
        "True when the agent's self-reported total differs from the gateway's by more "
        "than `usage_source.tolerance_ratio` (or the gateway saw 0 tokens and the agent "
        "reported some)."))
    @property
    def usage_mismatch(self) -> bool:
        source = self.usage_source
        if source is None or source["gateway"] is None or source["self_reported"] is None:
            return False
        ratio = source["difference_ratio"]
        return ratio is None or abs(ratio) > USAGE_TOLERANCE_RATIO  # type: ignore[arg-type]

    @property
    def tampered(self) -> bool:
        """Scored 0 because what the agent left could not be vouched for."""
        return self.integrity is not None and self.integrity.status == "tampered"

    @property
    def scored(self) -> bool:
        """Counts as passed or failed (not errored); see `is_scored`."""
        err = self.error
        return is_scored(err.kind if err else None, err.phase if err else None, self.reward)


class PhaseTiming(BaseModel):
    mean_sec: float
    total_sec: float


class NodeFigures(BaseModel):
    """One cluster node's share of a job's finished trials."""

    n_trials: int
    n_passed: int
    n_errored: int


class StepSummary(BaseModel):
    """One step name's figures over a job's multi-step trials."""

    n_run: int = 0
    n_scored: int = 0
    n_passed: int = 0
    mean_reward: float | None = None
    n_stopped: int = Field(default=0, description="Trials whose later steps it stopped.")


class JobSummary(BaseModel):
    """Aggregates over finished trials: jobs/<job>/summary.json, rewritten after each trial."""

    schema_version: int = SCHEMA_VERSION
    job_name: str
    agent: str
    model: str | None = None
    n_trials_planned: int
    n_trials: int
    n_passed: int
    n_failed: int
    n_errored: int
    pass_rate: float | None = Field(description="passed / (passed + failed); errors excluded.")
    pass_rate_all: float | None = Field(
        default=None, description="passed / n_trials: errors counted as not passed.")
    mean_reward: float | None = Field(description="Mean headline reward of non-errored trials.")
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    errors_by_cause: dict[str, int] = Field(
        default_factory=dict, description="Errored trials by whose fault (`error.caused_by`: "
        "agent, task, sandlot, user; `unknown` for results that do not say).")
    n_tampered: int = Field(
        default=0, description="Failed trials scored 0 because what the agent left could "
        "not be vouched for (`integrity.status` tampered); part of n_failed.")
    n_verifier_broken: int = Field(
        default=0, description="Failed trials whose verifier could not score what the "
        "agent left but scored a pristine sandbox (`verifier_failure`); part of n_failed.")
    n_neutralized: int = Field(
        default=0, description="Trials scored after hooks the agent planted were undone.")
    roots: dict[str, int] = Field(
        default_factory=dict, description="Trials by what their sandbox's root was (image, "
        "host, host-fallback; result.json `environment.base`): a host-fallback score is "
        "not comparable with one on the task's image.")
    timing: dict[str, PhaseTiming] = Field(default_factory=dict)
    nodes: dict[str, NodeFigures] = Field(
        default_factory=dict, description="`--ray`: the finished trials by the cluster node "
        "that ran them (result.json `node`); empty for a job run by this machine alone.")
    steps: dict[str, StepSummary] = Field(
        default_factory=dict, description="Multi-step tasks: each step's figures, by name.")
    usage: dict[str, object] | None = Field(
        default=None, description="Gateway usage summed over trials (null: no model used).")
    retried_usage: dict[str, object] | None = Field(
        default=None, description="Gateway usage of retried tries, summed (not in `usage`).")
    spend_usd: float | None = Field(
        default=None, description="What the job cost: `usage` plus `retried_usage` cost "
        "(null: no known price).")
    cost_per_passed_usd: float | None = Field(
        default=None, description="Gateway cost of all trials / n_passed (null: no pass or "
        "no known price).")
    tokens_per_sec: float | None = Field(
        default=None, description="Gateway tokens / summed agent-phase seconds of the trials "
        "with usage: how fast one agent spends, not the job's wall-clock rate.")
    telemetry_coverage: float | None = Field(
        default=None, description="Share of finished trials with trusted gateway usage "
        "(null for a job without a model).")
    n_trials_with_usage: int = Field(default=0, description="Trials with gateway usage.")
    n_usage_mismatch: int = Field(
        default=0, description="Trials whose agent self-report strays beyond the tolerance.")
    n_resumed: int = Field(default=0, description="Trials kept from an earlier run.")
    n_cancelled: int = 0
    complete: bool = False
    stopped: str | None = Field(
        default=None, description="Why the job stopped before its end: the provider refused "
        "the key or does not serve the model (the trials it cut short are `provider_error`), "
        "or the job's budget was reached (they are `cancelled`). Those trials and the ones "
        "not started run on resume.")
    stopped_by: Literal["provider", "job_budget"] | None = Field(
        default=None, description="What stopped the job early, when `stopped` is set.")
    n_budget_exceeded: int = Field(
        default=0, description="Trials whose own budget was spent (`budget_exceeded`): "
        "scored on what the agent left, so part of n_passed / n_failed.")
    updated_at: str = Field(default_factory=utc_now)
