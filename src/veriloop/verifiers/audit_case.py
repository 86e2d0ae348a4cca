"""One audit case: a completion, a reference and whether a verifier must accept it.  Its own module so that the
case suites (``mathverify_suite``) and the audit that runs them (``audit``) both import it without a circle."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AuditCase:
    completion: str
    reference: str
    expect: str  # accept | reject
    category: str  # the family
    note: str = ""
    part: str = "development"  # development | heldout | user
    source: str = "generated"  # the case file's stem, "generated", "math-verify tests" or the user's file
    labelled_by: str = "reading"  # who decided ``expect``: a person reading ("reading") or math-verify's tests
    prompt: str = ""  # the question, for a verifier that reads it (a judge); "" for those that do not
