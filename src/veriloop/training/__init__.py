"""Training, by role:

* ``trainer`` (the controller of one run) and ``dry_run``; ``config`` (the ``veriloop train`` option tree), with
  ``option_scopes`` (which component reads which option), ``capabilities`` (what engines and learners serve)
  and ``recipes`` (each algorithm's defaults);
* ``loop/``: the roles of one step (collect, signals, learner, critic) and the functions they share;
* ``distributed/``: the learner strategies across processes (ddp, fsdp2) and their rank processes;
* ``run/``: the run's infrastructure (run directory, checkpoints, metrics, tracking, alarms, export, pre-flight).

Imports go down that list (run, then loop, then distributed, then the option tree, then the controller):
``tests/test_layering_on_cpu.py`` checks it.  The built-in learner strategies, advantage estimators and policy
objectives are registered here (``registry.LEARNERS``, ``ESTIMATORS``, ``OBJECTIVES``), by path: their modules
import torch, and light readers (``training.run.alarms``, the report) are read without it."""

from veriloop.registry import ESTIMATORS, LEARNERS, OBJECTIVES

LEARNERS.register_path("local", "veriloop.training.loop.learner:LocalLearner")
LEARNERS.register_path("ddp", "veriloop.training.distributed.strategies:DDPLearner")
LEARNERS.register_path("fsdp2", "veriloop.training.distributed.strategies:FSDP2Learner")
for _name in ("grpo", "dr_grpo", "rloo", "reinforce", "gae", "gae_process", "filter", "one", "process"):
    ESTIMATORS.register_path(_name, f"veriloop.training.loop.estimators:BUILT_IN.{_name}")
for _name in ("clip", "dual-clip", "gspo", "pg", "likelihood", "dpo"):
    OBJECTIVES.register_path(_name, f"veriloop.training.loop.objectives:BUILT_IN.{_name}")
