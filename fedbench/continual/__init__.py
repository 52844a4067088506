"""The continual-learning axis: task streams, replay memories and the Acc / Forgetting metrics.

The engine side (the task stream as a round plug-in) is :mod:`fedbench.engine.task_stream`;
the tables and heat maps are :mod:`fedbench.report.forgetting`.
"""

from fedbench.continual.memory import ReplayMemory, balanced_quota, select_memory
from fedbench.continual.metrics import average_accuracy, forgetting
from fedbench.continual.tasks import TaskStream, split_tasks

__all__ = [
    "ReplayMemory",
    "TaskStream",
    "average_accuracy",
    "balanced_quota",
    "forgetting",
    "select_memory",
    "split_tasks",
]
