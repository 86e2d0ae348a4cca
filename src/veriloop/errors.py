"""Errors that mean the user's input is wrong, or that a part of a run elsewhere died, as opposed to a bug."""

from __future__ import annotations


class InputError(ValueError):
    """The user's input is wrong: a file, a field or a value; the message names it.

    The CLI prints it as a usage error (exit 2); anything else escaping a command is a bug in
    veriloop.  A ValueError too, so callers that catch ValueError keep working.
    """


class UnknownNameError(InputError, KeyError):
    """A name (of a task, a verifier, a strategy...) that nothing is registered under.

    A KeyError too, for callers that catch that.
    """

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0]) if self.args else ""


class ClusterFailure(RuntimeError):
    """A part of the run in other processes or on other machines died or stopped answering (a learner rank, its
    node): not the input, not a bug in veriloop.  The message names the rank (and node); the run's checkpoints are
    kept, and ``veriloop train --resume RUN_DIR`` continues from the last one.  A RuntimeError too."""
