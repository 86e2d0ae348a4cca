"""Learner strategies across processes: ddp and fsdp2 (``strategies``) and the rank processes they spawn
(``ranks``)."""
