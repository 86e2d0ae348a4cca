"""The roles of one training step: collect (sample and score), signals (advantages, the reference pass),
learner (the update: objective passes, optimizer), critic, and the pure functions they share (log-probs,
estimators, objectives, token values)."""
