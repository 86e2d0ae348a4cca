"""Test settings shared by every test module."""

import os

from hypothesis import settings

# Property tests draw the same examples on every run (CI must not pass or fail by luck);
# HYPOTHESIS_PROFILE=explore draws new ones, to hunt for counterexamples locally.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

from veriloop import verifiers  # noqa: E402


@verifiers.register("test-digit-share")
class DigitShare(verifiers.Verifier):
    """Share of digits in the completion: a dense reward a random tiny model varies on (the arithmetic
    verifier scores such a model 0 everywhere, and every advantage would be 0). Shared by the tests."""

    name, version = "test-digit-share", "1"

    def verify(self, completion, reference):
        score = sum(c.isdigit() for c in completion) / max(len(completion), 1)
        return self._verdict(score, {"digits": score})
