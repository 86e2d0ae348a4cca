"""Test-time strategies on scripted policies whose best answer is known, with exact budget accounting."""

import pytest

from veriloop.search.scripted import ScriptedProposer, ScriptedScorer
from veriloop.search.strategies import STRATEGIES, Cost, SearchSettings, Strategies, answer_key

# "1+1?": a policy right on one branch only, and that branch is the less likely one.
ONE_RIGHT_BRANCH = {
    "": [("1+1=3;", 0.7), ("1+1=2;", 0.3)],
    "1+1=3;": [("answer=3", 1.0)],
    "1+1=2;": [("answer=2", 1.0)],
}
PRM = ScriptedScorer({"1+1=3;": 0.1, "1+1=3;answer=3": 0.1, "1+1=2;": 0.9, "1+1=2;answer=2": 0.95})


def strategies(tree=ONE_RIGHT_BRANCH, scorer=PRM, seed=0, **settings):
    return Strategies(ScriptedProposer(tree, seed), scorer, SearchSettings(**settings))


def test_answer_key_groups_equivalent_answers():
    assert answer_key("x;answer=2") == answer_key("answer=2.0") == "2"
    assert answer_key("1+1=3;") is None  # no final answer: it does not vote
    assert answer_key("answer=2;answer=3") is None  # two answers: ambiguous, no vote


def test_single_sample_follows_the_likely_wrong_branch_most_often():
    wrong = sum(strategies(seed=s).run("single", "1+1?", 1).answer == "3" for s in range(200))
    assert 110 <= wrong <= 170  # 0.7 x 200 = 140, sd 6.5


def test_majority_vote_amplifies_the_likely_wrong_answer():
    # 16 samples: the wrong answer wins unless 8+ of 16 take the 0.3 branch (P < 0.08).
    wrong = sum(strategies(seed=s).run("majority", "1+1?", 16).answer == "3" for s in range(100))
    assert wrong >= 85


@pytest.mark.parametrize("name", ["best_of_n", "weighted_vote", "beam", "lookahead", "mcts"])
def test_prm_guided_strategies_find_the_right_branch(name):
    right = sum(strategies(seed=s, expand=16).run(name, "1+1?", 16).answer == "2" for s in range(50))
    # Each sees 16 first steps; it fails only when none takes the right branch: 0.7**16 = 0.003.
    assert right >= 48, (name, right)


def test_weighted_vote_beats_majority_where_the_prm_outweighs_the_count():
    # 12 wrong vs 4 right samples: majority says 3; 12 x 0.1 < 4 x 0.95 so the weighted vote says 2.
    tree = {"": [("1+1=3;", 0.75), ("1+1=2;", 0.25)], **{k: v for k, v in ONE_RIGHT_BRANCH.items() if k}}
    s = strategies(tree)

    class Fixed(ScriptedProposer):
        def complete(self, prompt, prefixes, n, cost, greedy=False):
            cost.tokens += 14 * n
            return ["1+1=3;answer=3"] * 12 + ["1+1=2;answer=2"] * 4

    s.proposer = Fixed(tree)
    assert s.run("majority", "1+1?", 16).answer == "3"
    assert s.run("weighted_vote", "1+1?", 16).answer == "2"


# A one-path tree: every count is fixed.  "1+1=2;" is 6 tokens, "answer=2" is 8.
ONE_PATH = {"": [("1+1=2;", 1.0)], "1+1=2;": [("answer=2", 1.0)]}


def test_budget_accounting_of_whole_solution_strategies():
    s = strategies(ONE_PATH)
    one = s.run("single", "1+1?", 1).cost
    assert (one.tokens, one.prm_calls) == (14, 0)
    bon = s.run("best_of_n", "1+1?", 4).cost
    assert (bon.tokens, bon.prm_calls) == (56, 4)
    maj = s.run("majority", "1+1?", 4).cost
    assert (maj.tokens, maj.prm_calls) == (56, 0)
    wv = s.run("weighted_vote", "1+1?", 4).cost
    assert (wv.tokens, wv.prm_calls) == (56, 4)
    assert bon.seconds >= 0 and isinstance(bon, Cost)


def test_budget_accounting_of_beam_and_lookahead():
    # beam, budget 4, expand 2: width 2.  Step 1: 1 beam x 2 = 2 candidates (12 tokens), one distinct
    # open prefix scored (1 call).  Step 2: 1 beam x 2 = 2 finished (16 tokens).  Final choice scores
    # the 2 finished solutions (2 calls): 28 tokens, 3 PRM calls.
    out = strategies(ONE_PATH, expand=2).run("beam", "1+1?", 4)
    assert (out.cost.tokens, out.cost.prm_calls, out.answer, out.candidates) == (28, 3, "2", 2)
    # lookahead 1 adds one greedy step (8 tokens) from the open prefix before scoring it.
    out = strategies(ONE_PATH, expand=2, lookahead=1).run("lookahead", "1+1?", 4)
    assert (out.cost.tokens, out.cost.prm_calls) == (36, 3)


def test_budget_accounting_of_mcts():
    # Simulation 1 expands the root (expand 2: 12 tokens, one distinct child) and values the child
    # (1 call); simulation 2 expands that child (16 tokens, one distinct finished child), values it
    # (1 call); simulation 3 reselects the finished leaf, whose value is cached (no call).
    out = strategies(ONE_PATH, expand=2).run("mcts", "1+1?", 3)
    assert (out.cost.tokens, out.cost.prm_calls, out.text) == (28, 2, "1+1=2;answer=2")


def test_mcts_with_verifier_values_needs_an_outcome_check_and_uses_it():
    s = strategies(expand=8, mcts_value="verifier")
    with pytest.raises(ValueError, match="outcome check"):
        s.run("mcts", "1+1?", 4)
    s = Strategies(
        ScriptedProposer(ONE_RIGHT_BRANCH, 0),
        None,
        SearchSettings(expand=8, mcts_value="verifier"),
        outcome_check=lambda text: checked.append(text) or float(text.endswith("answer=2")),
    )
    checked = []
    out = s.run("mcts", "1+1?", 8)
    assert out.answer == "2"
    assert out.cost.verifier_calls == len(checked) > 0 and out.cost.prm_calls == 0  # each check is in the cost


def test_bad_requests_say_what_is_wrong():
    s = Strategies(ScriptedProposer(ONE_RIGHT_BRANCH), None)
    with pytest.raises(ValueError, match="needs a scorer"):
        s.run("beam", "1+1?", 4)
    with pytest.raises(ValueError, match="unknown strategy"):
        s.run("bestofn", "1+1?", 4)
    with pytest.raises(ValueError, match="budget"):
        s.run("majority", "1+1?", 0)
    assert set(STRATEGIES) >= {"best_of_n", "majority", "weighted_vote", "beam", "lookahead", "mcts"}


class Reviser:
    """A scripted revision model: turns the wrong attempt into the right one, leaves a right one alone."""

    def complete(self, prompt, prefixes, n, cost, greedy=False):
        attempt = prompt.split("?", 1)[1].rstrip("|")
        out = "1+1=2;answer=2" if attempt.endswith("answer=3") else attempt
        cost.tokens += len(out) * n
        return [out] * n


def test_revision_chain_is_selected_over_and_costed():
    wrong_only = {"": [("1+1=3;", 1.0)], "1+1=3;": [("answer=3", 1.0)]}
    for select, answer in (("prm", "2"), ("last", "2"), ("majority", "3")):
        s = Strategies(ScriptedProposer(wrong_only), PRM, SearchSettings(revision_select=select), reviser=Reviser())
        out = s.run("revision", "1+1?", 2)  # chain: the wrong first attempt, then one revision
        assert out.answer == answer, select  # majority of [3, 2]: a tie goes to the first seen
        assert out.cost.tokens == 14 + 14 and out.candidates == 2
        assert out.cost.prm_calls == (2 if select == "prm" else 0)
    with pytest.raises(ValueError, match="revision model"):
        Strategies(ScriptedProposer(wrong_only), PRM).run("revision", "1+1?", 2)


def test_revision_pairs_take_the_nearest_right_solution():
    from veriloop.search.revision import closest_pairs, revision_prompt

    wrong = ["2+3=6;6*4=24;answer=24", "2+3=6;6*4=24;answer=24", "5*4=9;answer=9"]
    right = ["3+2=5;4*5=20;answer=20", "2+3=5;5*4=20;answer=20"]
    pairs = closest_pairs(wrong, right)
    assert [(w, r) for w, r, _ in pairs] == [(wrong[0], right[1]), (wrong[2], right[1])]  # duplicates once
    assert pairs[0][2] == 4  # four substitutions: 6->5 twice, 24->20 twice
    assert closest_pairs(wrong, []) == []
    assert revision_prompt("(2+3)*4?", "x") == "(2+3)*4?x|"


class HistoryReviser:
    """A scripted revision model that can fix an attempt only when it sees two or more attempts: the
    history is what it learns from.  With one, it writes another wrong answer."""

    def complete(self, prompt, prefixes, n, cost, greedy=False):
        attempts = prompt.split("?", 1)[1].split("|")[:-1]
        out = "1+1=2;answer=2" if len(attempts) >= 2 else "1+1=4;answer=4"
        cost.tokens += len(out) * n
        return [out] * n


def test_revision_reads_its_history_and_splits_the_budget_into_chains():
    wrong_only = {"": [("1+1=3;", 1.0)], "1+1=3;": [("answer=3", 1.0)]}
    for history, answer in ((1, "4"), (2, "2"), (4, "2")):
        settings = SearchSettings(revision_select="last", revision_history=history)
        s = Strategies(ScriptedProposer(wrong_only), None, settings, reviser=HistoryReviser())
        out = s.run("revision", "1+1?", 3)
        assert out.answer == answer, history  # history 1 sees one attempt only and never fixes it
        third = "1+1=2;answer=2" if history > 1 else "1+1=4;answer=4"
        assert out.chains == [["1+1=3;answer=3", "1+1=4;answer=4", third]]
    # five attempts in two chains: lengths 3 and 2, two first attempts sampled, three revisions
    settings = SearchSettings(revision_select="majority", revision_chains=2, revision_history=4)
    out = Strategies(ScriptedProposer(wrong_only), None, settings, reviser=HistoryReviser()).run("revision", "1+1?", 5)
    assert [len(c) for c in out.chains] == [3, 2] and out.candidates == 5
    assert out.cost.tokens == 2 * 14 + 3 * 14
    assert out.answer == "3"  # 3, 4, 2 | 3, 4: majority 3 (ties to the first seen)
    last = Strategies(
        ScriptedProposer(wrong_only),
        None,
        SearchSettings(revision_select="last", revision_chains=2),
        reviser=HistoryReviser(),
    ).run("revision", "1+1?", 5)
    assert last.answer == "2"  # the chains' last attempts: 2 and 4, a tie to the first


def test_revision_drift_counts_what_each_revision_did():
    from veriloop.search.run import revision_drift
    from veriloop.verifiers import get

    w, r = "1+1=3;answer=3", "1+1=2;answer=2"
    drift = revision_drift([[w, r, w], [r, r]], get("arithmetic-outcome"), "1+1")
    assert drift == {"revised_right": 2, "right_to_wrong": 1, "revised_wrong": 1, "wrong_to_right": 1}


def test_revision_chains_approach_their_target():
    import random

    from rapidfuzz.distance import Levenshtein

    from veriloop.search.revision import closest_pairs, kept_chain, revision_chains, revision_prompt

    wrong = ["2+3=6;6*4=24;answer=24", "5*4=9;answer=9", "2+3=5;5*4=21;answer=21", "9*9=81;answer=81"]
    right = ["2+3=5;5*4=20;answer=20"]
    one = revision_chains(wrong, right, 1, random.Random(0))
    assert [(c, t, d) for c, t, d in one] == [([w], r, d) for w, r, d in closest_pairs(wrong, right)]
    chains = revision_chains(wrong, right, 3, random.Random(0))
    assert len(chains) == 4 and any(len(c) > 1 for c, _, _ in chains) and all(len(c) <= 3 for c, _, _ in chains)
    for c, t, d in chains:
        dists = [Levenshtein.distance(a, t) for a in c]
        assert dists == sorted(dists, reverse=True) and d == dists[-1]  # each attempt nearer than the last
    kept = kept_chain(wrong, right[0], 4, random.Random(1))
    assert kept[-1] == right[0] and len(kept) <= 4
    assert revision_prompt("1+1?", ["a", "b"]) == "1+1?a|b|" and revision_prompt("1+1?", "a") == "1+1?a|"


# --------------------------------------------------------------------------- truncation and oracles


def test_a_scripted_budget_cuts_a_text_as_the_sampler_does():
    from veriloop.search.strategies import Truncated, answer_of, is_truncated

    cost = Cost()
    cut, ended = (
        ScriptedProposer({"": [("answer=33333", 1.0)]}, max_new_tokens=9).complete("q", [""], 1, cost)[0],
        ScriptedProposer({"": [("answer=2", 1.0)]}, max_new_tokens=9).complete("q", [""], 1, cost)[0],
    )
    assert cut == "answer=33" and is_truncated(cut) and isinstance(cut, Truncated) and cost.tokens == 9 + 8
    assert answer_key(cut) == "33" and answer_of(cut) is None  # the cut text reads as 33; it is no answer
    assert not is_truncated(ended) and answer_of(ended) == "2"
    ((step, finished),) = ScriptedProposer({"": [("1+1=2222;", 1.0)]}, max_new_tokens=4).step("q", [""], 1, Cost())
    assert step == "1+1=" and is_truncated(step) and finished  # a cut step ends the solution, unanswered


class _Fixed(ScriptedProposer):
    """Always the same samples (``texts`` in order), 8 tokens each."""

    def __init__(self, texts):
        super().__init__({"": [("x", 1.0)]})
        self.texts = texts

    def complete(self, prompt, prefixes, n, cost, greedy=False):
        cost.tokens += 8 * n
        return list(self.texts[:n])


def test_a_truncated_sample_never_votes_and_is_chosen_only_when_nothing_ended():
    from veriloop.search.strategies import Truncated

    # three cut samples that read as 3 (the PRM likes them best) and one ended "answer=2"
    texts = [Truncated("answer=3"), Truncated("answer=3"), "answer=2", Truncated("answer=3")]
    prm = ScriptedScorer({"answer=3": 0.99, "answer=2": 0.5})
    s = Strategies(_Fixed(texts), prm, SearchSettings())
    assert s.run("majority", "q", 4).answer == "2"  # counted, the cut ones would have won 3 to 1
    assert s.run("weighted_vote", "q", 4).answer == "2"
    best = s.run("best_of_n", "q", 4)
    assert best.answer == "2" and not best.truncated  # the ended one, whatever the scores
    only_cut = Strategies(_Fixed([Truncated("answer=3")] * 2), prm, SearchSettings())
    for name in ("single", "majority", "best_of_n"):
        out = only_cut.run(name, "q", 2)
        assert out.truncated and out.answer is None, name


def test_mcts_values_a_truncated_rollout_as_unanswered():
    tree = {"": [("answer=2222", 1.0)]}  # cut at 4 tokens: "answ", which the outcome check would never see
    s = Strategies(ScriptedProposer(tree, max_new_tokens=4), None, SearchSettings(mcts_value="verifier"))
    seen = []
    s.outcome_check = lambda text: seen.append(text) or 1.0
    out = s.run("mcts", "q", 3)
    assert seen == [] and out.truncated and out.answer is None and out.cost.verifier_calls == 0


def test_strategies_that_read_the_reference_are_oracles():
    from veriloop.search.lm import VerifierScorer
    from veriloop.verifiers import get

    oracle = Strategies(ScriptedProposer(ONE_RIGHT_BRANCH), VerifierScorer(get("arithmetic-outcome")), SearchSettings())
    assert [oracle.uses_reference(n) for n in ("single", "majority", "best_of_n", "weighted_vote", "mcts")] == [
        False,
        False,
        True,
        True,
        True,
    ]
    learned = strategies()  # a PRM scores: a test-time method
    assert not any(learned.uses_reference(n) for n in ("best_of_n", "weighted_vote", "beam", "mcts"))
    assert strategies(mcts_value="verifier").uses_reference("mcts")  # the verifier values its nodes
