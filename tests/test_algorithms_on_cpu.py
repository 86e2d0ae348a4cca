"""The maths of veriloop.algorithms against values worked by hand (most from the seeds)."""

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from veriloop.algorithms import (
    aggregate_loss,
    aggregation_weight,
    clip_fractions,
    clipped_surrogate,
    entropy_from_logprobs,
    group_advantages,
    importance_weighted_kl,
    kl_estimate,
    kl_exact,
    pass_at_k,
    sampling_logprobs,
    zero_variance_groups,
)

S3 = math.sqrt(3)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# ---------------------------------------------------------------- group advantages


def test_one_success_in_four_population_std():
    # r = [0,0,0,1]: mean 1/4, squared deviations (1,1,1,9)/16, variance 12/64 = 3/16,
    # population std sqrt(3)/4, so A = (-1/4)/(sqrt(3)/4) = -1/sqrt(3) and (3/4)/(sqrt(3)/4) = sqrt(3).
    adv = group_advantages(t([[0, 0, 0, 1]]), std="population", eps=0.0)
    assert torch.allclose(adv, t([[-1 / S3, -1 / S3, -1 / S3, S3]]), atol=1e-12)


def test_seeds_eps_1e8_values():
    # The seeds' numerical check with delta = 1e-8: -0.5773502559 and 1.7320507676.
    adv = group_advantages(t([[0, 0, 0, 1]]), eps=1e-8)
    assert adv[0, 0].item() == pytest.approx(-0.5773502559, abs=1e-10)
    assert adv[0, 3].item() == pytest.approx(1.7320507676, abs=1e-10)


def test_two_successes_population_and_sample():
    # r = [0,0,1,1]: mean 1/2, population std 1/2 -> A = [-1,-1,1,1];
    # sample std sqrt(1/3) = 0.5774 -> A = [-0.8660]*2 + [0.8660]*2.
    pop = group_advantages(t([[0, 0, 1, 1]]), std="population", eps=0.0)
    smp = group_advantages(t([[0, 0, 1, 1]]), std="sample", eps=0.0)
    assert torch.allclose(pop, t([[-1, -1, 1, 1]]))
    assert torch.allclose(smp, t([[-0.8660254, -0.8660254, 0.8660254, 0.8660254]]), atol=1e-7)


def test_one_success_sample_std():
    # r = [0,0,0,1] with the sample std: variance (3/4)/3 = 1/4, std 1/2 -> A = [-0.5]*3 + [1.5].
    adv = group_advantages(t([[0, 0, 0, 1]]), std="sample", eps=0.0)
    assert torch.allclose(adv, t([[-0.5, -0.5, -0.5, 1.5]]))


def test_alternating_rewards():
    # r = [1,0,1,0]: mean 0.5, population std 0.5 -> [1,-1,1,-1] (seeds, chapter 30).
    adv = group_advantages(t([[1, 0, 1, 0]]), eps=0.0)
    assert torch.allclose(adv, t([[1, -1, 1, -1]]))


@pytest.mark.parametrize("rewards", [[0, 0, 0, 0], [1, 1, 1, 1], [0.3] * 8])
def test_zero_variance_group_gives_exact_zeros(rewards):
    adv = group_advantages(t([rewards]), eps=1e-6)
    assert torch.equal(adv, torch.zeros_like(adv))
    assert zero_variance_groups(t([rewards])).all()


def test_rows_are_separate_groups():
    # B=2, G=4 (not square): each row uses its own mean and std.
    adv = group_advantages(t([[0, 0, 0, 1], [0, 0, 1, 1]]), eps=0.0)
    assert torch.allclose(adv[0], t([-1 / S3, -1 / S3, -1 / S3, S3]))
    assert torch.allclose(adv[1], t([-1, -1, 1, 1]))
    assert zero_variance_groups(t([[0, 0, 0, 1], [1, 1, 1, 1]])).tolist() == [False, True]


def test_std_none_only_centres():
    adv = group_advantages(t([[0, 0, 0, 1]]), std="none")
    assert torch.allclose(adv, t([[-0.25, -0.25, -0.25, 0.75]]))


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        group_advantages(t([0, 1]))
    with pytest.raises(ValueError, match="std"):
        group_advantages(t([[0, 1]]), std="unbiased")


rewards_strategy = st.lists(
    st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=2, max_size=9), min_size=1, max_size=4
).filter(lambda rows: len({len(r) for r in rows}) == 1)


@given(rewards_strategy)
@settings(max_examples=60, deadline=None)
def test_population_vs_sample_differ_by_sqrt_g_over_g_minus_1(rows):
    r = t(rows)
    G = r.shape[1]
    pop = group_advantages(r, std="population", eps=0.0)
    smp = group_advantages(r, std="sample", eps=0.0)
    flat = zero_variance_groups(r)
    assert torch.allclose(pop[~flat], smp[~flat] * math.sqrt(G / (G - 1)), atol=1e-9)


@given(rewards_strategy, st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_permuting_a_group_permutes_its_advantages(rows, rnd):
    r = t(rows)
    perm = list(range(r.shape[1]))
    rnd.shuffle(perm)
    assert torch.allclose(group_advantages(r)[:, perm], group_advantages(r[:, perm]), atol=1e-12)


@given(rewards_strategy)
@settings(max_examples=60, deadline=None)
def test_vectorised_equals_loop(rows):
    r = t(rows)
    G = r.shape[1]
    out = group_advantages(r, eps=1e-6)
    for b, row in enumerate(rows):
        mean = sum(row) / G
        std = math.sqrt(sum((x - mean) ** 2 for x in row) / G)
        for i, x in enumerate(row):
            assert out[b, i].item() == pytest.approx((x - mean) / (std + 1e-6), abs=1e-6)


# ---------------------------------------------------------------- clipped surrogate


@pytest.mark.parametrize(
    "adv, ratio, expected",
    [
        # (A, rho): min(rho*A, clip(rho, 0.8, 1.2)*A), the seeds' table in section 3.1
        (2.0, 1.5, 2.4),  # min(3, 2.4): a good token pushed far enough stops gaining
        (-2.0, 1.5, -3.0),  # min(-3, -2.4): a bad token whose probability rose keeps the full penalty
        (2.0, 0.5, 1.0),  # min(1, 1.6): the pull back towards the good token stays
        (-2.0, 0.5, -1.6),  # min(-1, -1.6): no further gain from pushing a bad token down
        (1.0, 1.0, 1.0),
    ],
)
def test_clipped_surrogate_table(adv, ratio, expected):
    assert clipped_surrogate(t([ratio]), t([adv]), 0.2, 0.2).item() == pytest.approx(expected)


def test_wrong_denominator_changes_the_objective():
    # Seeds 8.1: behaviour v0 gave 0.20, current v2 gives 0.30, v1 gave 0.25.  With A = -2:
    # true ratio 1.5 -> min(-3.0, -2.4) = -3.0; wrong ratio 0.30/0.25 = 1.2 -> -2.4.
    true = clipped_surrogate(t([math.exp(math.log(0.30) - math.log(0.20))]), t([-2.0]))
    wrong = clipped_surrogate(t([0.30 / 0.25]), t([-2.0]))
    assert true.item() == pytest.approx(-3.0)
    assert wrong.item() == pytest.approx(-2.4)


def test_clip_higher_is_asymmetric():
    # DAPO clip-higher: eps_low 0.2, eps_high 0.28 -> a good token may rise to 1.28 before clipping.
    assert clipped_surrogate(t([1.25]), t([1.0]), 0.2, 0.28).item() == pytest.approx(1.25)
    assert clipped_surrogate(t([1.35]), t([1.0]), 0.2, 0.28).item() == pytest.approx(1.28)
    assert clipped_surrogate(t([0.7]), t([-1.0]), 0.2, 0.28).item() == pytest.approx(-0.8)


def test_clip_fractions():
    ratio = t([[0.5, 1.5, 1.0, 1.5]])
    adv = t([[-1.0, 1.0, 1.0, -1.0]])
    low, high = clip_fractions(ratio, adv, torch.ones(1, 4), 0.2, 0.2)
    assert (low, high) == (0.25, 0.25)  # token 0 clipped low, token 1 clipped high; token 3 is not clipped


def test_surrogate_gradient_is_zero_when_clipped():
    ratio = t([1.5]).requires_grad_()
    clipped_surrogate(ratio, t([2.0])).sum().backward()
    assert ratio.grad.item() == 0.0
    ratio = t([1.5]).requires_grad_()
    clipped_surrogate(ratio, t([-2.0])).sum().backward()
    assert ratio.grad.item() == -2.0


# ---------------------------------------------------------------- KL


def test_k3_single_token():
    # current 0.6, reference 0.5: log r = log(0.5/0.6) = -0.182322; k3 = r - 1 - log r
    # = 0.833333 - 1 + 0.182322 = 0.015655.
    k3 = kl_estimate(t([math.log(0.6)]), t([math.log(0.5)]), "k3")
    assert k3.item() == pytest.approx(0.0156549, abs=1e-6)
    assert kl_estimate(t([math.log(0.6)]), t([math.log(0.5)]), "k1").item() == pytest.approx(0.182322, abs=1e-6)
    assert kl_estimate(t([math.log(0.6)]), t([math.log(0.5)]), "k2").item() == pytest.approx(
        0.5 * 0.182322**2, abs=1e-7
    )


def test_exact_kl_two_actions_and_asymmetry():
    # Seeds 3.2: KL((0.6,0.4) || (0.5,0.5)) = 0.6 ln 1.2 + 0.4 ln 0.8 = 0.020136; reversed 0.020411.
    q, p = t([0.6, 0.4]).log(), t([0.5, 0.5]).log()
    assert kl_exact(q, p).item() == pytest.approx(0.020136, abs=1e-6)
    assert kl_exact(p, q).item() == pytest.approx(0.020411, abs=1e-6)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_unbiased_estimators_average_to_the_exact_kl(estimator):
    # E_{y~q}[k(y)] summed over the whole support equals KL(q || p) for k1 and k3.
    torch.manual_seed(0)
    q = torch.log_softmax(torch.randn(7, dtype=torch.float64), -1)
    p = torch.log_softmax(torch.randn(7, dtype=torch.float64), -1)
    expectation = (q.exp() * kl_estimate(q, p, estimator)).sum()
    assert expectation.item() == pytest.approx(kl_exact(q, p).item(), rel=1e-10)


def test_k2_is_biased():
    q, p = t([0.9, 0.1]).log(), t([0.2, 0.8]).log()
    expectation = (q.exp() * kl_estimate(q, p, "k2")).sum()
    assert abs(expectation.item() - kl_exact(q, p).item()) > 0.05


def test_k3_nonnegative():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    assert (kl_estimate(x, torch.zeros_like(x), "k3") >= 0).all()


def test_importance_weighted_kl_seeds_old_current_reference():
    # Seeds 3.2: old (behaviour) (0.4, 0.6), current (0.6, 0.4), reference (0.5, 0.5); KL(current || ref) = 0.020136.
    # k3 at A: 0.5/0.6 - 1 - ln(0.5/0.6) = 0.015655; at B: 0.5/0.4 - 1 - ln(0.5/0.4) = 0.25 - 0.223144 = 0.026856.
    # Tokens drawn by old: the plain mean is E_old[k3] = 0.4 * 0.015655 + 0.6 * 0.026856 = 0.022376 (not the KL);
    # weights w = current/old = 0.6/0.4 = 1.5 at A and 0.4/0.6 = 2/3 at B:
    # E_old[w k3] = 0.4 * 1.5 * 0.015655 + 0.6 * (2/3) * 0.026856 = 0.009393 + 0.010743 = 0.020136.
    old, cur, ref = t([0.4, 0.6]).log(), t([0.6, 0.4]).log(), t([0.5, 0.5]).log()
    k3 = kl_estimate(cur, ref, "k3")
    assert k3.tolist() == pytest.approx([0.0156549, 0.0268564], abs=1e-6)
    weighted = importance_weighted_kl(k3, cur, old)
    assert weighted.tolist() == pytest.approx([1.5 * 0.0156549, 2 / 3 * 0.0268564], abs=1e-6)
    assert (old.exp() * k3).sum().item() == pytest.approx(0.022376, abs=1e-6)
    assert (old.exp() * weighted).sum().item() == pytest.approx(0.020136, abs=1e-6)
    assert (old.exp() * weighted).sum().item() == pytest.approx(kl_exact(cur, ref).item(), rel=1e-12)


def test_importance_weight_is_detached_and_one_on_policy():
    # On the samples' own policy the weight is 1 and the estimate unchanged; the weight carries no gradient, so
    # d(w k)/d logprobs = w dk/d logprobs (the on-policy estimator's gradient, reweighted).
    lp = t([-0.3, -1.2]).requires_grad_()
    ref = t([-0.5, -0.9])
    k = kl_estimate(lp, ref, "k2")
    assert torch.equal(importance_weighted_kl(k, lp, lp.detach()), k)
    behaviour = t([-0.8, -1.0])
    importance_weighted_kl(kl_estimate(lp, ref, "k2"), lp, behaviour).sum().backward()
    w = torch.exp(lp.detach() - behaviour)
    assert torch.allclose(lp.grad, w * (lp.detach() - ref))  # d k2 / d lp = log(pi/ref)


# ---------------------------------------------------------------- aggregation


def two_answers():
    # Seeds 4.4: rewards [1,0] -> A = [+1,-1]; lengths 2 and 4; rho = 1 everywhere,
    # so the per-token surrogate is +1 on the short answer's 2 tokens, -1 on the long one's 4.
    values = t([[1, 1, 0, 0], [-1, -1, -1, -1]])
    mask = t([[1, 1, 0, 0], [1, 1, 1, 1]])
    return values, mask


def test_answer_then_group_mean_is_zero():
    # per answer: (2/2 + (-4/4)) / 2 = 0
    values, mask = two_answers()
    assert aggregate_loss(values, mask, "seq-mean-token-mean").item() == pytest.approx(0.0)


def test_token_mean_is_minus_one_third():
    # over the 6 valid tokens: (2 - 4) / 6 = -1/3
    values, mask = two_answers()
    assert aggregate_loss(values, mask, "token-mean").item() == pytest.approx(-1 / 3)


def test_constant_normaliser():
    # Dr. GRPO: (2/4 + (-4)/4) / 2 = -0.25 with max_len 4; with max_len 8: (2/8 - 4/8)/2 = -0.125
    values, mask = two_answers()
    assert aggregate_loss(values, mask, "seq-mean-token-sum-norm").item() == pytest.approx(-0.25)
    assert aggregate_loss(values, mask, "seq-mean-token-sum-norm", max_len=8).item() == pytest.approx(-0.125)


masks = st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=2, max_size=8).filter(
    lambda rows: all(any(r) for r in rows)
)


@given(masks, st.sampled_from(["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]))
@settings(max_examples=60, deadline=None)
def test_values_under_the_mask_do_not_matter(rows, mode):
    mask = t(rows)
    torch.manual_seed(len(rows))
    values = torch.randn(mask.shape, dtype=torch.float64)
    noisy = torch.where(mask.bool(), values, torch.full_like(values, float("nan")))
    assert torch.allclose(aggregate_loss(values, mask, mode), aggregate_loss(noisy, mask, mode))


@given(masks, st.sampled_from(["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]), st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_micro_batches_sum_to_the_full_batch(rows, mode, parts):
    mask = t(rows)
    torch.manual_seed(parts)
    values = torch.randn(mask.shape, dtype=torch.float64)
    full = aggregate_loss(values, mask, mode, max_len=5)
    pieces = sum(
        aggregate_loss(v, m, mode, max_len=5) * aggregation_weight(m, mask, mode)
        for v, m in zip(values.chunk(parts), mask.chunk(parts))
    )
    assert pieces.item() == pytest.approx(full.item(), abs=1e-12)


def test_loop_equals_vectorised_aggregation():
    values, mask = two_answers()
    per_seq = [sum(v for v, m in zip(vr, mr) if m) / sum(mr) for vr, mr in zip(values.tolist(), mask.tolist())]
    assert aggregate_loss(values, mask, "seq-mean-token-mean").item() == pytest.approx(sum(per_seq) / 2)


# ---------------------------------------------------------------- sampling log-probs


def test_temperature_two_and_top_p():
    # p = [0.6, 0.3, 0.1]; T=2 -> sqrt(p)/sum = [0.4727, 0.3343, 0.1930]; top-p 0.8 keeps the
    # first two (cumulative 0.8070 >= 0.8) -> [0.5858, 0.4142, 0]; token 2 has log-prob -0.8814.
    logits = t([0.6, 0.3, 0.1]).log()
    tempered = sampling_logprobs(logits, temperature=2.0).exp()
    assert torch.allclose(tempered, t([0.472734, 0.334273, 0.192993]), atol=1e-6)
    lp = sampling_logprobs(logits, temperature=2.0, top_p=0.8)
    assert torch.allclose(lp[:2].exp(), t([0.585786, 0.414214]), atol=1e-6)
    assert lp[1].item() == pytest.approx(-0.881374, abs=1e-6)
    assert lp[2].item() == float("-inf")
    assert math.log(0.3) == pytest.approx(-1.2040, abs=1e-4)  # the raw softmax's value differs


def test_top_k_and_greedy_edge():
    logits = t([[2.0, 1.0, 0.5, -1.0]])
    lp = sampling_logprobs(logits, top_k=2)
    assert torch.isinf(lp[0, 2:]).all() and lp[0, :2].exp().sum().item() == pytest.approx(1.0)
    assert sampling_logprobs(logits, top_p=1e-9)[0, 0].item() == pytest.approx(0.0)  # top token always kept


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"temperature must be > 0 .* got 0\.0"):
        sampling_logprobs(t([1.0, 2.0]), temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 0\.0"):
        sampling_logprobs(t([1.0, 2.0]), top_p=0.0)


@given(st.integers(0, 2**31 - 1), st.floats(0.3, 2.0), st.integers(0, 12), st.floats(0.05, 1.0))
@example(seed=0, temperature=0.5, top_k=0, top_p=0.9999999999999999)  # a tail lost to float32 rounding
@example(seed=1, temperature=1.0, top_k=0, top_p=1e-9)
@settings(max_examples=80, deadline=None)
def test_matches_transformers_logits_processors(seed, temperature, top_k, top_p):
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 16, generator=g) * 3
    procs = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    hf = torch.log_softmax(procs(None, logits.clone()), -1)
    ours = sampling_logprobs(logits, temperature, top_k, top_p)
    # Same support, same probabilities (up to the boundary token when a cumulative sum ties top_p).
    same_support = torch.isinf(hf) == torch.isinf(ours)
    assert same_support.all()
    finite = ~torch.isinf(ours)
    assert torch.allclose(hf[finite], ours[finite], atol=1e-5)


def test_entropy():
    assert entropy_from_logprobs(t([0.5, 0.5]).log()).item() == pytest.approx(math.log(2))
    assert entropy_from_logprobs(t([1.0, 0.0]).log()).item() == pytest.approx(0.0)


# ---------------------------------------------------------------- pass@k


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c/n
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 1, 8) == 1.0  # a subset of all 8 contains the correct one


def test_pass_at_k_approaches_independent_sampling():
    # Seeds: uniform four-candidate policy, outcome pass probability 0.5:
    # 1 - 0.5^4 = 0.938 and 1 - 0.5^8 = 0.996; p = 0.2, 5 tries: 1 - 0.8^5 = 0.67232.
    assert pass_at_k(100_000, 50_000, 4) == pytest.approx(0.9375, abs=1e-3)
    assert pass_at_k(100_000, 50_000, 8) == pytest.approx(0.99609, abs=1e-3)
    assert pass_at_k(100_000, 20_000, 5) == pytest.approx(0.67232, abs=1e-3)


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
@settings(max_examples=100, deadline=None)
def test_pass_at_k_equals_binomial_formula(nck):
    n, c, k = nck
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match=r"got n=4, c=5, k=1"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match=r"got n=4, c=1, k=5"):
        pass_at_k(4, 1, 5)


def test_maj_at_k_hand_values():
    from veriloop.algorithms import maj_at_k

    # [A, A, B], A right.  k=1: 2/3.  k=2: {A,A} -> A; {A,B} twice -> tie, 1/2 each: (1 + 1/2 + 1/2)/3.
    assert maj_at_k(["A", "A", "B"], [1, 1, 0], 1) == pytest.approx(2 / 3)
    assert maj_at_k(["A", "A", "B"], [1, 1, 0], 2) == pytest.approx(2 / 3)
    assert maj_at_k(["A", "A", "B"], [1, 1, 0], 3) == pytest.approx(1.0)
    # Random subsets, not the first k: [B, B, A, A, A], A right, k=2.  The first two samples vote B
    # (0), but over all C(5,2) = 10 subsets: {B,B} 1 -> 0, {A,A} 3 -> 1, {A,B} 6 -> 1/2: 0.6.
    assert maj_at_k(["B", "B", "A", "A", "A"], [0, 0, 1, 1, 1], 2) == pytest.approx(0.6)
    # No answer does not vote; a subset with no votes scores 0: [None, A], k=1 -> 1/2.
    assert maj_at_k([None, "A"], [0, 1], 1) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="both correct and incorrect"):
        maj_at_k(["A", "A"], [1, 0], 1)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        maj_at_k(["A"], [1], 2)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=9), st.data())
@settings(max_examples=40, deadline=None)
def test_maj_at_1_is_the_share_correct_and_sampling_agrees_with_enumeration(labels, data):
    from veriloop.algorithms import maj_at_k

    answers = [None if x == 3 else f"a{x}" for x in labels]
    correct = [x == 0 for x in labels]
    assert maj_at_k(answers, correct, 1) == pytest.approx(sum(correct) / len(correct))
    k = data.draw(st.integers(1, len(labels)))
    exact = maj_at_k(answers, correct, k)
    sampled = maj_at_k(answers, correct, k, max_exact=0, samples=20_000, seed=1)
    assert abs(exact - sampled) < 0.02


def test_maj_at_k_falls_back_to_sampling_on_many_classes():
    import time

    from veriloop.algorithms import maj_at_k

    answers = [f"a{i}" for i in range(60)] + ["right"] * 4  # 61 classes: C(64, 8)-scale enumeration
    correct = [False] * 60 + [True] * 4
    t0 = time.time()
    value = maj_at_k(answers, correct, 8, samples=5000)
    assert time.time() - t0 < 10
    # "right" wins whenever it is drawn twice or more (every other answer appears once), or once
    # and it wins the tie among the 8 singletons: P = sum_j P(j rights) * (1 if j >= 2 else 1/8 if j == 1)
    from math import comb

    p = sum(comb(4, j) * comb(60, 8 - j) / comb(64, 8) * (1 if j >= 2 else 1 / 8 if j == 1 else 0) for j in range(5))
    assert value == pytest.approx(p, abs=0.02)
