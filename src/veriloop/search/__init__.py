"""Test-time compute: strategies that spend a budget of samples (strategies.py), their LM and PRM parts
(lm.py), scripted policies for tests (scripted.py), revision data (revision.py), the search run (run.py).

The built-in strategies are registered here, once, in ``STRATEGIES`` (their modules only define them), by path:
the modules import torch, and ``--help`` lists the names without it.  A plugin registers its own the same way."""

from veriloop.registry import STRATEGIES

for _name, _target in {
    "single": "strategies:SINGLE",
    "best_of_n": "strategies:BEST_OF_N",
    "majority": "strategies:MAJORITY",
    "weighted_vote": "strategies:WEIGHTED_VOTE",
    "beam": "strategies:BEAM",
    "lookahead": "strategies:LOOKAHEAD",
    "mcts": "strategies:MCTS",
    "revision": "strategies:REVISION",
    "rstar": "rstar:RSTAR",
}.items():
    STRATEGIES.register_path(_name, f"veriloop.search.{_target}")
