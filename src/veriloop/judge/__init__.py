"""A model-based judge (seed 003 s.5.1, "AI 评判": a model grades by a rubric): the rubric, the strict verdict
grammar, the judge model, its training on rule verdicts, its audit and the ``judge`` verifier."""
