"""Mixed rewards: each record scored by the reward source of its data source (seed 003 s.5.1, s.6 stage 4).

A batch may hold problems of several kinds (a JSONL row's ``data_source``: maths, code, open questions, as verl's
rows name them).  ``reward_sources "maths=gsm8k,chat=reward_model"`` scores each kind with its own source: a
registered verifier's name, or ``reward_model`` (the run's ``--reward_model``, unaudited: a kind without rules has no
rule to record beside it).  A kind not named is scored by ``--verifier`` (or the task's own).  Each record keeps the
verdict of the source that scored it (``verifier`` names it) and that source's components; a step's ``accuracy`` is
over the records a rule judged (those with an ``outcome`` component), and with several kinds in a step each kind
has its own ``source_<kind>_*`` metrics.
"""

from __future__ import annotations

from veriloop.errors import InputError
from veriloop.verifiers.base import Verdict

REWARD_MODEL = "reward_model"  # the route to the run's --reward_model
JUDGE = "judge"  # the route to the run's --judge


def parse_reward_sources(text: str) -> dict[str, str]:
    """``"maths=gsm8k,chat=reward_model"`` -> ``{"maths": "gsm8k", "chat": "reward_model"}``; a malformed entry or
    a kind named twice is an ``InputError`` naming it."""
    routes: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        source, sep, name = (part.strip() for part in entry.partition("="))
        if not sep or not source or not name:
            raise InputError(f"reward_sources: {entry!r} is not DATA_SOURCE=VERIFIER (e.g. maths=gsm8k)")
        if source in routes:
            raise InputError(f"reward_sources: data source {source!r} is named twice")
        routes[source] = name
    if text.strip() and not routes:
        raise InputError(f"reward_sources: {text!r} names no DATA_SOURCE=VERIFIER")
    return routes


class SourceRoutedReward:
    """A verifier that hands each completion to the verifier of its data source (``routes``), others to
    ``default``.  It reads each completion's data source (``reads_data_sources``) and passes prompts on to a source
    that reads them (a reward model)."""

    name = "by-source"
    reads_data_sources = True

    def __init__(self, routes: dict, default):
        self.routes, self.default = dict(routes), default
        self.reads_prompts = any(getattr(v, "reads_prompts", False) for v in (default, *routes.values()))
        self.version = "+".join(f"{s}:{v.tag}" for s, v in sorted(routes.items())) + f"+*:{default.tag}"

    @property
    def tag(self) -> str:
        return f"{self.name}@{self.version}"

    def source_verifier(self, source: str):
        return self.routes.get(source, self.default)

    def verify_batch(
        self,
        completions: list[str],
        references: list[str],
        prompts: list[str] | None = None,
        data_sources: list[str] | None = None,
    ) -> list[Verdict]:
        sources = data_sources if data_sources is not None else [""] * len(completions)
        out: list[Verdict | None] = [None] * len(completions)
        for source in dict.fromkeys(sources):  # each kind's completions in one batch, in order of first appearance
            at = [i for i, s in enumerate(sources) if s == source]
            verifier = self.source_verifier(source)
            args = ([completions[i] for i in at], [references[i] for i in at])
            if getattr(verifier, "reads_prompts", False):
                if prompts is None:
                    raise InputError(f"data source {source!r} is scored by {verifier.tag}, which reads the prompts")
                verdicts = verifier.verify_batch(*args, prompts=[prompts[i] for i in at])
            else:
                verdicts = verifier.verify_batch(*args)
            for i, v in zip(at, verdicts):
                out[i] = v
        return out  # type: ignore[return-value]


def build_reward_sources(cfg, default):
    """The run's reward: ``default`` alone, or routed by data source when ``cfg.reward_sources`` names any."""
    routes = parse_reward_sources(cfg.reward_sources)
    if not routes:
        return default
    from veriloop.verifiers import get as get_verifier

    built = {}
    for source, name in routes.items():
        if name == REWARD_MODEL:
            from veriloop.preference.verifier import PreferenceVerifier

            built[source] = PreferenceVerifier(path=cfg.reward_model, unaudited=True)
        elif name == JUDGE:
            from veriloop.judge.verifier import JudgeVerifier

            built[source] = JudgeVerifier(path=cfg.judge, unaudited=True)
        else:
            built[source] = get_verifier(name)
    return SourceRoutedReward(built, default)
