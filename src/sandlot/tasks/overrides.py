"""`--override-cpus/-memory-mb/-storage-mb`: one job's resources for every task, as
Harbor's flags of the same names.

Applied to each task's config once, where the job loads its tasks, so the sandbox, the
limit messages and result.json all see the same figure the user asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sandlot.tasks.loader import Task


@dataclass(frozen=True)
class ResourceOverrides:
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None

    def apply(self, task: Task) -> Task:
        """`task` with its [environment] resources replaced by the ones given."""
        changes = {name: value for name, value in (("cpus", self.cpus),
                                                   ("memory_mb", self.memory_mb),
                                                   ("storage_mb", self.storage_mb))
                   if value is not None}
        if not changes:
            return task
        environment = task.config.environment.model_copy(update=changes)
        return replace(task, config=task.config.model_copy(update={"environment": environment}))
