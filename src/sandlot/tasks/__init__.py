"""Loading and validating task folders in the Harbor / Terminal-Bench layout."""

from sandlot.tasks.check import Problem, check_task, check_tasks
from sandlot.tasks.config import TaskConfig
from sandlot.tasks.loader import Task, discover_tasks, load_task, load_task_or_invalid

__all__ = ["Problem", "Task", "TaskConfig", "check_task", "check_tasks", "discover_tasks",
           "load_task", "load_task_or_invalid"]
