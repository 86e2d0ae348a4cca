"""Test-time compute: strategies that spend a budget of samples (strategies.py), their LM and PRM parts
(lm.py), scripted policies for tests (scripted.py), revision data (revision.py), the search run (run.py)."""
