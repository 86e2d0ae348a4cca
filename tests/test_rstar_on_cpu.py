"""rStar: MCTS over reasoning actions with an outcome-only self-consistency reward, answers chosen by
mutual consistency with a discriminator (scripted policies: every number by hand; then the real policy)."""

import json

import pytest

from veriloop.errors import InputError
from veriloop.search.rstar import RNode, RStar, sub_steps
from veriloop.search.run import SearchConfig, run_search
from veriloop.search.scripted import ScriptedProposer
from veriloop.search.strategies import Cost, SearchSettings, Strategies
from veriloop.tasks.config import TaskConfig

# the policy writes 1+1=3 four times as often as 1+1=2; either way its next step copies the value it wrote
POLICY = {"": [("1+1=2;", 0.2), ("1+1=3;", 0.8)], "1+1=2;": [("answer=2", 1.0)], "1+1=3;": [("answer=3", 1.0)]}
# a discriminator that, shown the first step, answers 2 however that step reads
HONEST = {"": [("1+1=2;", 1.0)], "1+1=2;": [("answer=2", 1.0)], "1+1=3;": [("answer=2", 1.0)]}


def _strategies(policy_tree=POLICY, disc_tree=HONEST, seed=3, **settings):
    disc = ScriptedProposer(disc_tree, seed=7) if disc_tree is not None else None
    return Strategies(ScriptedProposer(policy_tree, seed=seed), None, SearchSettings(**settings), discriminator=disc)


@pytest.mark.parametrize("seed", range(2, 8))
def test_mutual_consistency_chooses_the_answer_the_discriminator_reproduces(seed):
    # self-consistency alone favours 3 (the policy's majority); the discriminator, completing each
    # trajectory cut after its first step, reaches 2 from both: only "1+1=2;answer=2" is confirmed
    # (seeds whose four rollouts reach both answers)
    out = _strategies(seed=seed).run("rstar", "1+1?", 4)
    assert out.answer == "2" and out.candidates == 1
    # remove the mechanism (the discriminator is the policy: it confirms whatever the policy wrote) and the
    # majority answer wins
    same = _strategies(disc_tree=None, seed=seed).run("rstar", "1+1?", 4)
    assert same.answer == "3" and same.candidates == 2


def test_the_terminal_reward_is_its_answers_vote_share_added_along_the_path():
    s = _strategies()
    search = RStar(s, "1+1?", Cost())
    root = RNode("", "", 0)
    search.rollout(root)
    # the root expands by A1 (4 steps) and A2 (4 solutions); the first rollout follows the first A1 child down
    assert [c.action for c in root.children].count("A1") <= 4 and {c.action for c in root.children} == {"A1", "A2"}
    terminal = root
    while terminal.children:  # the one visited child at each level
        (terminal,) = [c for c in terminal.children if c.visits]
    path = [root, *terminal.path()]
    assert terminal.terminal and terminal.visits == 1
    votes = dict(search.votes)
    # every terminal sample so far voted: the root's 4 A2 solutions, the first child's 4 A1 answer steps and
    # its 4 A2 solutions
    assert sum(votes.values()) == 12
    share = votes[terminal.text[-1]] / 12
    assert search.confidence(terminal) == pytest.approx(share)
    # no intermediate evaluation: each node on the path got the terminal's reward, nothing else
    assert all(n.visits == 1 and n.total == pytest.approx(share) for n in path)
    assert all(c.visits == 0 and c.total == 0 for c in root.children if c not in path)


def test_actions_follow_the_seeds_order_constraints():
    subs = {"(1+1)*2?": ["1+1?"]}
    s = _strategies(**{"max_steps": 4})
    s.sub_questions = lambda prompt: subs.get(prompt, [])
    search = RStar(s, "(1+1)*2?", Cost())
    root = RNode("", "", 0)
    assert search.applicable(root) == ["A1", "A2", "A3"]  # A3: a sub-question is left; A4 needs an A3 before it
    a3 = RNode("1+1=2;", "A3", 1, sub_done=1, sub_question="1+1?", parent=root)
    assert search.applicable(a3) == ["A1", "A2", "A4"]  # its one sub-question is answered
    a1 = RNode("1+1=2;", "A1", 1, parent=root)
    assert search.applicable(a1) == ["A1", "A2"]  # a free step ends the sub-questions
    deep = RNode("x;", "A1", 3, parent=a1)
    assert search.applicable(deep) == ["A2"]  # the last level only finishes
    assert search.applicable(RNode("answer=1", "A2", 1, terminal=True)) == []
    assert RStar(_strategies(), "(1+1)*2?", Cost()).applicable(root) == ["A1", "A2"]  # no decomposition: no A3


def test_a_sub_question_is_answered_as_a_problem_of_its_own_and_re_answered_by_majority():
    tree = {
        "(1+1)*2?": {
            "": [("1+1=2;", 1.0)],
            "1+1=2;": [("2*2=4;", 1.0)],
            "1+1=2;2*2=4;": [("answer=4", 1.0)],
            "1+1=3;": [("3*2=6;", 1.0)],
            "1+1=3;3*2=6;": [("answer=6", 1.0)],
        },
        "1+1?": {"": [("1+1=2;", 0.5), ("1+1=3;", 0.5)], "1+1=2;": [("answer=2", 1.0)], "1+1=3;": [("answer=3", 1.0)]},
    }
    s = Strategies(
        ScriptedProposer(tree, seed=1, per_prompt=True),
        None,
        SearchSettings(expand=2, rstar_reanswer=5),
        sub_questions=lambda p: ["1+1?"] if p == "(1+1)*2?" else [],
    )
    cost = Cost()
    search = RStar(s, "(1+1)*2?", cost)
    root = RNode("", "", 0)
    search.expand(root)
    a3 = [c for c in root.children if c.action == "A3"]
    # the sub-question's answers, their steps without the answer step, appended to the trace
    assert {c.text for c in a3} <= {"1+1=2;", "1+1=3;"} and all(c.sub_question == "1+1?" for c in a3)
    before = cost.tokens
    search.expand(a3[0])
    (a4,) = [c for c in a3[0].children if c.action == "A4"]
    # five fresh answers of "1+1?", the majority's steps replace the A3 node's (its parent's trace + them)
    assert a4.text in ("1+1=2;", "1+1=3;") and a4.sub_done == 1 and a4.depth == 2
    assert cost.tokens > before
    assert sub_steps("1+1=2;answer=2", "semicolon") == "1+1=2;"
    assert sub_steps("a\nb\nanswer: 3", "lines") == "a\nb\n"


class _Counting(ScriptedProposer):
    """A scripted proposer that keeps the tokens it generated."""

    generated = 0

    def step(self, prompt, prefixes, n, cost, greedy=False):
        before = cost.tokens
        out = super().step(prompt, prefixes, n, cost, greedy)
        self.generated += cost.tokens - before
        return out


def test_the_discriminators_tokens_count_and_an_unconfirmed_search_still_answers():
    policy, disc = _Counting(POLICY, seed=3), _Counting(HONEST, seed=7)
    out = Strategies(policy, None, SearchSettings(), discriminator=disc).run("rstar", "1+1?", 4)
    assert disc.generated > 0 and out.cost.tokens == policy.generated + disc.generated
    without = _strategies(disc_tree=None)
    without.discriminator = ScriptedProposer(
        {"": [("answer=9", 1.0)], "1+1=2;": [("answer=9", 1.0)], "1+1=3;": [("answer=9", 1.0)]}, seed=0
    )
    out = without.run("rstar", "1+1?", 2)
    assert out.candidates == 0 and out.answer in ("2", "3")  # nothing confirmed: the best-scored trajectory


def test_arithmetic_sub_questions_are_the_root_operands():
    task = TaskConfig().build()
    assert task.sub_questions("(2+3)*(4-1)?") == ["2+3?", "4-1?"]
    assert task.sub_questions("(2+3)*4?") == ["2+3?"]
    assert task.sub_questions("2*4?") == [] and task.sub_questions("what?") == []


def test_rstar_runs_on_the_built_in_policy_through_search(tmp_path):
    cfg = SearchConfig(
        strategy="rstar",
        budgets="2",
        problems=3,
        split="validation",
        bin_samples=2,
        out=str(tmp_path / "a"),
        expand=2,
        threads=1,
    )
    first = run_search(cfg, progress=False)
    cell = first["strategies"]["rstar"]["2"]
    assert cell["mean_tokens"] > 0 and cell["mean_prm_calls"] == 0  # no PRM: the outcome's self-consistency only
    cfg.out = str(tmp_path / "b")
    again = run_search(cfg, progress=False)
    assert again["strategies"]["rstar"]["2"]["accuracy"] == cell["accuracy"]
    rows = [(tmp_path / d / "results.jsonl").read_text() for d in "ab"]
    strip = [[{k: v for k, v in json.loads(r).items() if k != "seconds"} for r in t.splitlines()] for t in rows]
    assert strip[0] == strip[1]  # the same seeds, the same search (this machine and torch build)


def test_a_missing_discriminator_is_named(tmp_path):
    cfg = SearchConfig(
        strategy="rstar", budgets="1", problems=1, discriminator=str(tmp_path / "nowhere"), out=str(tmp_path / "o")
    )
    with pytest.raises(InputError, match="--discriminator: .*nowhere"):
        run_search(cfg, progress=False)
    with pytest.raises(InputError, match="rstar_reanswer"):
        SearchConfig(strategy="rstar", rstar_reanswer=0)


# A5 and posed sub-questions: the original question leads the policy astray (2*3=5), its restatement does not
REPHRASE = "Restate every condition of: {question}"
RESTATED = {
    "Restate every condition of: 2*3+1?": {"": [("six plus one?", 0.5), ("2*3+1, six and one?", 0.5)]},
    "six plus one?": {"": [("6+1=7;", 1.0)], "6+1=7;": [("answer=7", 1.0)]},
    "2*3+1, six and one?": {"": [("6+1=7;", 1.0)], "6+1=7;": [("answer=7", 1.0)]},
    "2*3+1?": {"": [("2*3=5;", 1.0)], "2*3=5;": [("5+1=6;", 1.0)], "2*3=5;5+1=6;": [("answer=6", 1.0)]},
}


def test_a5_restates_the_question_at_the_root_and_every_action_below_reads_the_restatement():
    s = Strategies(ScriptedProposer(RESTATED, seed=1, per_prompt=True), None, SearchSettings(rstar_rephrase=REPHRASE))
    cost = Cost()
    search = RStar(s, "2*3+1?", cost)
    root = RNode("", "", 0)
    assert search.applicable(root) == ["A1", "A2", "A5"]  # A5 only at the root, only with a template
    search.expand(root)
    a5 = [c for c in root.children if c.action == "A5"]
    # expand=4 restatements of two kinds: one node each, an empty trace, the restatement as its question
    assert {c.question for c in a5} == {"six plus one?", "2*3+1, six and one?"} and all(c.text == "" for c in a5)
    assert all(c.depth == 1 and not c.terminal for c in a5)
    # the other children read the original question
    assert {c.text for c in root.children if c.action == "A2"} == {"2*3=5;5+1=6;answer=6"}
    assert search.applicable(a5[0]) == ["A1", "A2"]  # no second restatement below the root
    before = cost.tokens
    search.expand(a5[0])
    assert {c.text for c in a5[0].children if c.action == "A2"} == {"6+1=7;answer=7"}
    assert {c.text for c in a5[0].children if c.action == "A1"} == {"6+1=7;"}
    assert all(c.question == a5[0].question for c in a5[0].children)  # inherited down the path
    assert cost.tokens > before
    # the restatement's own tokens are counted: 4 samples of "six plus one?" (13) or the other (19)
    fresh = Cost()
    RStar(s, "2*3+1?", fresh).expand(RNode("", "", 0))
    assert fresh.tokens >= 4 * 13
    # without a template there is no A5
    assert RStar(_strategies(), "2*3+1?", Cost()).applicable(root) == ["A1", "A2"]


def test_a_whole_rstar_search_reaches_the_restated_answer():
    disc = ScriptedProposer({"": [("6+1=7;", 1.0)], "6+1=7;": [("answer=7", 1.0)], "2*3=5;": [("answer=7", 1.0)]})
    s = Strategies(
        ScriptedProposer(RESTATED, seed=1, per_prompt=True),
        None,
        SearchSettings(rstar_rephrase=REPHRASE),
        discriminator=disc,
    )
    out = s.run("rstar", "2*3+1?", 6)
    # the restated question's answer 7 is the one the discriminator reproduces (it never reaches 6)
    assert out.answer == "7" and out.candidates >= 1


POSED = "Next sub-question of {question} after [{trace}]:"
POSED_TREE = {
    "Next sub-question of (1+1)*2? after []:": {"": [("1+1?\nand then more", 0.5), ("one plus one?", 0.5)]},
    "1+1?": {"": [("1+1=2;", 1.0)], "1+1=2;": [("answer=2", 1.0)]},
    "one plus one?": {"": [("1+1=3;", 1.0)], "1+1=3;": [("answer=3", 1.0)]},
    "(1+1)*2?": {"": [("1+1=2;", 1.0)], "1+1=2;": [("answer=4", 1.0)]},
}


def test_a3_poses_its_sub_questions_with_the_template_on_a_task_without_a_decomposition():
    settings = SearchSettings(expand=4, rstar_subquestion=POSED, max_steps=6)
    s = Strategies(ScriptedProposer(POSED_TREE, seed=2, per_prompt=True), None, settings)
    search = RStar(s, "(1+1)*2?", Cost())
    root = RNode("", "", 0)
    assert search.applicable(root) == ["A1", "A2", "A3"]  # posed: no task decomposition needed
    search.expand(root)
    a3 = [c for c in root.children if c.action == "A3"]
    # the first line of each posed sub-question, each distinct one answered once, its steps joined to the trace
    assert {(c.sub_question, c.text) for c in a3} == {("1+1?", "1+1=2;"), ("one plus one?", "1+1=3;")}
    assert all(c.sub_done == 1 for c in a3)
    # a posed A3 may follow an A3 (the policy decides when to stop asking), and A4 re-answers it
    assert search.applicable(a3[0]) == ["A1", "A2", "A3", "A4"]
    # the template wins over the task's own sub-questions where both exist
    s.sub_questions = lambda p: ["never asked?"]
    assert RStar(s, "(1+1)*2?", Cost()).subs == []


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("rstar_rephrase", "Restate it", "names no \\{question\\}"),
        ("rstar_rephrase", "{question} {trace}", "unknown field\\(s\\) \\['trace'\\]"),
        ("rstar_subquestion", "{question} {steps}", "unknown field\\(s\\) \\['steps'\\]"),
        ("rstar_subquestion", "{question", "is not a template"),
    ],
)
def test_the_rstar_templates_are_checked(option, value, message):
    with pytest.raises(InputError, match=message):
        SearchConfig(strategy="rstar", **{option: value})


def test_a5_and_posed_sub_questions_run_on_gsm8k_through_search(tmp_path):
    """GSM8K has no decomposition of its own: with the templates, rStar runs all five actions on it through
    `veriloop search` (a tiny random model with a context for GSM8K's questions: the mechanics, not accuracy)."""
    from veriloop.models.tiny import TinyModelConfig, build_char_tokenizer, build_tiny_model
    from veriloop.rollout.sampler import SamplingParams
    from veriloop.search.rstar import RStar as Search

    tok = build_char_tokenizer(max_length=2048)
    shape = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, max_positions=2048)
    build_tiny_model(tok, shape, seed=1).save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    actions: list[str] = []
    expand = Search.expand

    def spy(self, node):  # which actions the real search expanded with
        expand(self, node)
        actions.extend(c.action for c in node.children)

    common = {
        "task": TaskConfig(name="gsm8k"),
        "policy": str(tmp_path / "policy"),
        "strategy": "rstar",
        "budgets": "2",
        "problems": 2,
        "bin_samples": 1,
        "expand": 2,
        "max_steps": 3,
        "threads": 1,
        "sampling": SamplingParams(max_new_tokens=12),
    }
    plain = run_search(SearchConfig(**common, out=str(tmp_path / "plain")), progress=False)
    Search.expand = spy
    try:
        cfg = SearchConfig(
            **common,
            out=str(tmp_path / "five"),
            rstar_rephrase="Restate the problem, listing every condition: {question}\n",
            rstar_subquestion="Problem: {question}\nSteps so far: {trace}\nNext sub-question:",
        )
        five = run_search(cfg, progress=False)
    finally:
        Search.expand = expand
    # A4 only follows an A3 that a rollout chose; A3 needs a non-blank posed line (a seeded random model writes
    # one: measured 2 of 2 per expansion here)
    assert {"A1", "A2", "A3", "A5"} <= set(actions)
    # the restatements and the posed sub-questions are generated tokens: measured 118 against 48 a problem
    tokens = [r["strategies"]["rstar"]["2"]["mean_tokens"] for r in (five, plain)]
    assert tokens[0] > tokens[1] > 0, tokens
