"""A preference reward model (Bradley-Terry, seed 003 s.5.1): trained on (prompt, chosen, rejected) pairs, read as a
reward source (the ``preference`` verifier, ``--reward_model DIR``) and as a DPO pair source (``--loss.dpo_pairs
best-worst``)."""
