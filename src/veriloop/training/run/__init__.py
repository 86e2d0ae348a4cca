"""Run infrastructure: the run directory and its checkpoints, metrics, tracking, alarms, export and the
pre-flight checks.  Nothing here imports the loop."""
