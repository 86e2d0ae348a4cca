"""Process reward models: steps, automatic step labels, step scoring (the PRM issue)."""

from veriloop.prm.steps import SEPARATORS, SPLITTERS, Step, split_steps, step_end_positions, step_read_positions

__all__ = ["SEPARATORS", "SPLITTERS", "Step", "split_steps", "step_end_positions", "step_read_positions"]
