"""Problem sources.  ``get_task(name, **options)``; built-in: ``arithmetic``, ``jsonl``, ``gsm8k``, ``fixed``."""

from veriloop.tasks import arithmetic as _arithmetic  # noqa: F401  (registers the task)
from veriloop.tasks import fixed as _fixed  # noqa: F401
from veriloop.tasks import gsm8k as _gsm8k  # noqa: F401
from veriloop.tasks import jsonl as _jsonl  # noqa: F401
from veriloop.tasks.base import Problem, Task, get_task, register_task, task_names

__all__ = ["Problem", "Task", "get_task", "register_task", "task_names"]
