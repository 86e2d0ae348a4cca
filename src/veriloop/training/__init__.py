"""The training loop and its roles.  The built-in learner strategies, advantage estimators and policy objectives
are registered here (``registry.LEARNERS``, ``ESTIMATORS``, ``OBJECTIVES``), by path: their modules import torch,
and this package's light modules (``training.alarms``, ``training.config``'s schema) are read without it."""

from veriloop.registry import ESTIMATORS, LEARNERS, OBJECTIVES

LEARNERS.register_path("local", "veriloop.training.learner:LocalLearner")
LEARNERS.register_path("ddp", "veriloop.training.distributed:DDPLearner")
LEARNERS.register_path("fsdp2", "veriloop.training.distributed:FSDP2Learner")
for _name in ("grpo", "dr_grpo", "rloo", "reinforce", "gae", "filter", "one", "process"):
    ESTIMATORS.register_path(_name, f"veriloop.training.estimators:BUILT_IN.{_name}")
for _name in ("clip", "dual-clip", "gspo", "pg", "likelihood", "dpo"):
    OBJECTIVES.register_path(_name, f"veriloop.training.objectives:BUILT_IN.{_name}")
