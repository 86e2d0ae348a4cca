"""Process reward models: steps, automatic step labels, step scoring (the PRM issue)."""

from veriloop.prm.steps import SPLITTERS, Step, split_steps, step_end_positions

__all__ = ["SPLITTERS", "Step", "split_steps", "step_end_positions"]
