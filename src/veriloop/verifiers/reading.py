"""The reading of one stated value (``Read``), shared by the modules that read statements and sentences.

``answer_rules`` reads a marked statement, ``closing`` an unmarked sentence; both hand back a ``Read``,
which ``assertions`` combines.  ``not_asserted`` is the reading of a value whose statement is negated,
hedged, questioned or retracted: the reason it names is the one a verdict reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from veriloop.verifiers.polarity import NEGATED


@dataclass(frozen=True)
class Read:
    """How one stated value reads: ``answer`` (value), ``several`` (values), ``not`` (reason), ``empty``."""

    kind: str
    value: str = ""
    reason: str = ""
    span: str = ""  # the raw text of the value as stated (a box kept whole), for a maths parser
    negated: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()


REASONS = {NEGATED: "negated", "retracted": "retracted"}  # a polarity -> the reason a verdict names (else "hedged")


def not_asserted(polarity: str, key: str) -> Read:
    """The reading of a value whose statement is negated, hedged or questioned."""
    reason = REASONS.get(polarity, "hedged")
    return Read(
        "not", reason=reason, negated=frozenset({key}) if reason == "negated" else frozenset(), numbers=frozenset({key})
    )
