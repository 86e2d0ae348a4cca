"""The task's verifier: 1 when the completion's first line is the reversed word."""

from __future__ import annotations

from veriloop.verifiers import Verifier


class ReverseExact(Verifier):
    name, version = "reverse-exact", "1"

    def verify(self, completion: str, reference: str):
        lines = completion.strip().splitlines()
        answer = lines[0].strip() if lines else ""
        ok = float(answer == reference)
        return self._verdict(ok, {"outcome": ok}, "reversed" if ok else f"answer {answer!r}")
