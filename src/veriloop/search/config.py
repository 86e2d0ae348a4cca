"""The ``veriloop search`` (and ``allocate``) options: ``SearchConfig`` and which strategy reads which option."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.options import OptionScope, check_declared, declare
from veriloop.registry import STRATEGIES
from veriloop.rollout.sampler import SamplingParams
from veriloop.search.strategies import SearchSettings
from veriloop.tasks.config import TaskConfig

_DEFAULTS = SearchSettings()  # the strategies' own defaults, which the options below keep
# the strategies that sample whole solutions from the prompt: the ones a thinking budget applies to
WHOLE_SOLUTION_STRATEGIES = ("single", "majority", "best_of_n", "weighted_vote")
ScoreSource = Literal["prm", "verifier"]


@dataclass
class SearchConfig:
    """``veriloop search``: test-time strategies over held-out (or validation) problems at several budgets."""

    policy: str = field(default="builtin:base", metadata={"help": "policy that proposes solutions and steps"})
    prm: str = field(default="", metadata={"help": "PRM (or ORM) directory from `veriloop prm train` for scorer=prm"})
    scorer: ScoreSource = field(
        default="prm",
        metadata={
            "help": "what best_of_n / weighted_vote rank by: prm, or verifier (outcome, reads the reference: "
            "an oracle, reported as an upper bound, never chosen)"
        },
    )
    strategy: str = field(
        default="single,majority,best_of_n,weighted_vote,beam,lookahead,mcts",
        metadata={"help": "comma-separated strategies: " + ", ".join(STRATEGIES) + " (revision needs revision_policy)"},
    )
    budgets: str = field(
        default="1,2,4,8,16", metadata={"help": "comma-separated budgets (samples / candidates / simulations)"}
    )
    problems: int = field(default=100, metadata={"help": "first N problems of the split", "ge": 1})
    split: Literal["heldout", "validation"] = field(
        default="heldout", metadata={"help": "the problems' split (choose strategies on validation)"}
    )
    bin_samples: int = field(
        default=16, metadata={"help": "samples per problem that set its difficulty (pass rate)", "ge": 1}
    )
    bin_edges: str = field(default="0.34,0.67", metadata={"help": "pass-rate edges between difficulty bins"})
    out: str = field(default="runs/search", metadata={"help": "run directory (summary.json, plot, table)"})
    seed: int = field(default=0, metadata={"help": "seed of every draw"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    batch_problems: int = field(
        default=16,
        metadata={
            "help": "problems served by one sampler call and one PRM pass (single, votes, best_of_n, beam, "
            "lookahead); 1 = one problem at a time; the same draws either way",
            "ge": 1,
        },
    )
    # one option per field of the strategies' SearchSettings (``settings()``), with its defaults
    expand: int = field(
        default=_DEFAULTS.expand, metadata={"help": "beam/lookahead/mcts: steps sampled per expanded node", "ge": 1}
    )
    max_steps: int = field(
        default=_DEFAULTS.max_steps, metadata={"help": "beam/lookahead/mcts: longest solution, in steps", "ge": 1}
    )
    lookahead: int = field(
        default=_DEFAULTS.lookahead, metadata={"help": "lookahead: greedy steps rolled out before scoring"}
    )
    uct_c: float = field(default=_DEFAULTS.uct_c, metadata={"help": "mcts: UCT exploration constant c"})
    mcts_value: ScoreSource = field(
        default=_DEFAULTS.mcts_value,
        metadata={"help": "mcts: value of a node from the prm or the verifier (reads the reference: an oracle)"},
    )
    aggregation: str = field(
        default="", metadata={"help": "PRM aggregate (min, prod or last: see prm train); '' = the PRM's own"}
    )
    revision_policy: str = field(default="", metadata={"help": "revision: model trained on wrong -> right pairs"})
    revision_select: Literal["prm", "majority", "last"] = field(
        default=_DEFAULTS.revision_select,
        metadata={"help": "revision: how the answer is chosen over the chain"},
    )
    revision_history: int = field(
        default=_DEFAULTS.revision_history,
        metadata={
            "help": "revision: attempts of its chain the revision model reads (as its pairs were built)",
            "ge": 1,
        },
    )
    revision_chains: int = field(
        default=_DEFAULTS.revision_chains, metadata={"help": "revision: parallel chains sharing each budget", "ge": 1}
    )
    rstar_reanswer: int = field(
        default=_DEFAULTS.rstar_reanswer,
        metadata={"help": "rstar: samples whose majority re-answers a sub-question (action A4)", "ge": 1},
    )
    rstar_rephrase: str = field(
        default=_DEFAULTS.rstar_rephrase,
        metadata={
            "help": "rstar A5: prompt template naming {question} that asks the policy to restate the problem (at "
            "the root); '' = no A5"
        },
    )
    rstar_subquestion: str = field(
        default=_DEFAULTS.rstar_subquestion,
        metadata={
            "help": "rstar A3: prompt template naming {question} and {trace} that asks the policy for the next "
            "sub-question (any task with steps); '' = the task's own sub-questions, if it has them"
        },
    )
    discriminator: str = field(
        default="",
        metadata={
            "help": "rstar: policy that completes cut trajectories (mutual consistency); '' = the policy, "
            "drawing from a seed of its own"
        },
    )
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self):
        check_typed(self)
        self.task.refuse_tools("veriloop search")
        unknown = [s for s in self.strategy_list() if s not in STRATEGIES]
        if unknown:
            raise InputError(f"strategy: unknown {unknown}; known: {list(STRATEGIES)}")
        if any(b < 1 for b in self.budget_list()):
            raise InputError(f"budgets must be >= 1, got {self.budgets!r}")
        edges = self.edge_list()
        if edges != sorted(edges) or any(not 0 < e < 1 for e in edges):
            raise InputError(f"bin_edges must increase within (0, 1), got {self.bin_edges!r}")
        if "revision" in self.strategy_list() and not self.revision_policy:
            raise InputError("strategy revision needs --revision_policy DIR (see `veriloop revision-pairs`)")
        step_level = [s for s in self.strategy_list() if s in ("beam", "lookahead")]
        if self.scorer == "verifier" and step_level:
            raise InputError(f"scorer=verifier judges whole solutions only; {step_level} need step scores (a PRM)")
        if self.sampling.temperature <= 0:
            raise InputError("search samples: sampling.temperature must be > 0")
        stepwise = [s for s in self.strategy_list() if s not in WHOLE_SOLUTION_STRATEGIES]
        if self.sampling.max_thinking_tokens and stepwise:
            raise InputError(
                f"sampling.max_thinking_tokens caps whole solutions (budget forcing); {stepwise} extend "
                f"solutions step by step: use --strategy with {', '.join(WHOLE_SOLUTION_STRATEGIES)}"
            )
        _check_template("rstar_rephrase", self.rstar_rephrase, ("question",))
        _check_template("rstar_subquestion", self.rstar_subquestion, ("question", "trace"))
        check_declared(self)

    def settings(self, aggregation: str) -> SearchSettings:
        """The strategies' settings from these options, with ``aggregation`` resolved ('' = the PRM's own)."""
        return SearchSettings(
            **{**{f.name: getattr(self, f.name) for f in fields(SearchSettings)}, "aggregation": aggregation}
        )

    def strategy_list(self) -> list[str]:
        return [s.strip() for s in self.strategy.split(",") if s.strip()]

    def budget_list(self) -> list[int]:
        try:
            return sorted({int(b) for b in self.budgets.split(",") if b.strip()})
        except ValueError:
            raise InputError(f"budgets must be integers separated by commas, got {self.budgets!r}") from None

    def edge_list(self) -> list[float]:
        try:
            return [float(e) for e in self.bin_edges.split(",") if e.strip()]
        except ValueError:
            raise InputError(f"bin_edges must be numbers separated by commas, got {self.bin_edges!r}") from None


def _check_template(option: str, template: str, fields_: tuple[str, ...]) -> None:
    """A prompt template names {question} and no field outside ``fields_`` (a literal brace is {{ or }})."""
    if not template:
        return
    import string

    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise InputError(f"{option}: {template!r} is not a template ({e}; a literal brace is {{{{ or }}}})") from None
    unknown = sorted(names - set(fields_))
    if unknown or "question" not in names:
        raise InputError(
            f"{option}: a template naming {{question}}"
            + (f" (and {{{fields_[1]}}})" if len(fields_) > 1 else "")
            + (f"; unknown field(s) {unknown}" if unknown else "; it names no {question}")
        )


# The strategies' options (each registered Strategy lists those it reads): a search reads those of its set.
STRATEGY_OPTIONS = (
    "prm",
    "scorer",
    "aggregation",
    "expand",
    "max_steps",
    "lookahead",
    "uct_c",
    "mcts_value",
    "revision_policy",
    "revision_select",
    "revision_history",
    "revision_chains",
    "rstar_reanswer",
    "rstar_rephrase",
    "rstar_subquestion",
    "discriminator",
)
STRATEGY_SCOPE = OptionScope(
    "strategy set",
    "strategy",
    STRATEGY_OPTIONS,
    lambda names: {o for n in names.split(",") if n in STRATEGIES for o in STRATEGIES.get(n).reads},
    choices=STRATEGIES.names,
    component=lambda cfg: ",".join(cfg.strategy_list()),
)
SEARCH_COMMON = (
    "policy",
    "strategy",
    "budgets",
    "problems",
    "split",
    "bin_samples",
    "bin_edges",
    "out",
    "seed",
    "threads",
    "batch_problems",
    "task",
    "sampling",
)
declare(SearchConfig, [STRATEGY_SCOPE], SEARCH_COMMON)
