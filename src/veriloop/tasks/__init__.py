"""Problem sources.  ``get_task(name, **options)``; the built-in tasks are registered here (``registry.TASKS``):
``arithmetic`` (the built-in task), ``gsm8k``, ``jsonl`` (your rows) and ``fixed`` (one problem)."""

from veriloop.registry import TASKS
from veriloop.tasks.arithmetic import ArithmeticTask
from veriloop.tasks.base import Problem, Task, get_task, register_task, task_names
from veriloop.tasks.fixed import FixedTask
from veriloop.tasks.gsm8k import GSM8KTask
from veriloop.tasks.jsonl import JsonlTask

for _task in (ArithmeticTask, GSM8KTask, JsonlTask, FixedTask):
    TASKS.register(_task.name, _task)

__all__ = ["Problem", "Task", "get_task", "register_task", "task_names"]
