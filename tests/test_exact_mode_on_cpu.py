"""Exact mode: the trainer's own update, averaged over every possible group, against the true gradient.

A candidate policy over K answers plugs into the same Trainer; every group of G samples is
enumerated (K**G of them) and weighted by its probability, so the *expected* update of an
estimator is computed exactly, with no sampling noise.  With SGD, lr 1 and one pass, the
change of the logits is the gradient of the objective, so each test compares expectations to
the true gradient of J(z) = sum_k softmax(z)_k r_k with a tolerance no biased estimator meets.
"""

import itertools
import math

import pytest
import torch

from veriloop.algorithms import kl_exact
from veriloop.config import build_config
from veriloop.models.candidates import CandidatePolicy
from veriloop.rollout.records import Record
from veriloop.tasks.fixed import FixedTask
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer
from veriloop.verifiers import from_reward_function


def make_trainer(tmp_path, candidates, rewards, logits, G, **overrides):
    table = dict(zip(candidates, rewards))
    # .get: the trainer's preflight (d8399d7) first scores an empty completion against the task's references
    verifier = from_reward_function(
        lambda prompts, completions, **_: [table.get(c, 0.0) for c in completions], name="table"
    )
    settings = {
        "run_dir": str(tmp_path / "run"),
        "steps": 1,
        "save_rollouts": False,
        "rollout.prompts_per_step": 1,
        "rollout.group_size": G,
        "optim.name": "sgd",
        "optim.lr": 1.0,
        "optim.grad_clip": 0.0,
        "update.inner_updates": 1,
        "update.skip_zero_advantage": False,
        "kl.beta": 0.0,
        "sampling.temperature": 1.0,
        **overrides,
    }
    cfg = build_config(TrainConfig, {}, settings)
    policy = CandidatePolicy(candidates, torch.tensor(logits, dtype=torch.float64))
    return Trainer(cfg, progress=False, policy=policy, task=FixedTask("q?", "1"), verifier=verifier), policy


def group_records(policy, group):
    lp = torch.log_softmax(policy.logits.detach(), -1)
    return [
        Record(
            problem_id="p",
            group_id="0",
            prompt="q?",
            reference="1",
            prompt_ids=[0],
            completion_ids=[k],
            completion=policy.candidates[k],
            behavior_logprobs=[float(lp[k])],
            sampling={},
            policy_version=0,
            finish_reason="eos",
        )
        for k in group
    ]


def expected_update(trainer, policy, G, stat=None):
    """E over all K**G groups of (change of the logits after one update, optional update stat)."""
    p = policy.probs()
    K = len(policy.candidates)
    mean_delta, mean_stat = torch.zeros(K, dtype=torch.float64), 0.0
    start = policy.logits.detach().clone()
    gen = torch.Generator().manual_seed(0)
    for group in itertools.product(range(K), repeat=G):
        weight = float(torch.prod(p[list(group)]))
        records = group_records(policy, group)
        trainer.score(records)
        lb = trainer.learning_signal(records)[0]
        stats = trainer.learner.update(lb, trainer.kl_control.beta, gen) if lb is not None else {}
        mean_delta += weight * (policy.logits.detach() - start)
        mean_stat += weight * stats.get(stat, 0.0) if stat else 0.0
        policy.logits.data.copy_(start)
    return mean_delta, mean_stat


def true_gradient(logits, rewards):
    z = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    (torch.softmax(z, -1) * torch.tensor(rewards, dtype=torch.float64)).sum().backward()
    return z.grad


FOUR = ["2+3=5;5*4=20;answer=20", "2+3=5;5+4=9;answer=9", "2+3=6;6*4=20;answer=20", "answer=20 or 9"]
LOGITS4 = [0.3, -0.2, 0.5, -1.0]
REWARDS4 = [1.0, 0.0, 1.0, 0.0]


def test_seeds_two_action_hand_calculation(tmp_path):
    # Seeds 2.2: p(A) = sigmoid(z) = 0.25, r(A) = 1, r(B) = 0, constant baseline b = 0.25.
    # A sampled: (1 - 0.25) * d log p/dz = 0.75 * 0.75 = 0.5625; B: (0 - 0.25) * (-0.25) = 0.0625;
    # 0.25 * 0.5625 + 0.75 * 0.0625 = 0.1875 = p (1 - p) = dJ/dz.
    logits = [math.log(0.25 / 0.75), 0.0]
    trainer, policy = make_trainer(
        tmp_path,
        ["A", "B"],
        [1.0, 0.0],
        logits,
        G=1,
        algo="reinforce",
        **{"advantage.baseline": "constant", "advantage.baseline_value": 0.25},
    )
    delta, _ = expected_update(trainer, policy, G=1)
    assert delta[0].item() == pytest.approx(0.1875, abs=1e-12)
    assert delta[1].item() == pytest.approx(-0.1875, abs=1e-12)


@pytest.mark.parametrize("baseline", ["none", "constant"])
def test_reinforce_with_an_action_independent_baseline_is_unbiased(tmp_path, baseline):
    trainer, policy = make_trainer(
        tmp_path,
        FOUR,
        REWARDS4,
        LOGITS4,
        G=3,
        algo="reinforce",
        **{"advantage.baseline": baseline, "advantage.baseline_value": 0.7},
    )
    delta, _ = expected_update(trainer, policy, G=3)
    assert torch.allclose(delta, true_gradient(LOGITS4, REWARDS4), atol=1e-12)


def test_skipping_zero_advantage_rows_does_not_bias_the_estimate(tmp_path):
    trainer, policy = make_trainer(
        tmp_path, FOUR, REWARDS4, LOGITS4, G=3, algo="reinforce", **{"update.skip_zero_advantage": True}
    )
    delta, _ = expected_update(trainer, policy, G=3)
    assert torch.allclose(delta, true_gradient(LOGITS4, REWARDS4), atol=1e-12)


REF_LOGITS = [0.0, 0.4, -0.3, 0.2]


@pytest.mark.parametrize(
    "algo, placement, estimator, entropy",
    [
        ("grpo", "loss", "k2", 0.0),
        ("grpo", "loss", "k3", 0.0),
        ("grpo", "loss", "exact", 0.0),
        ("reinforce", "reward", "k1", 0.0),
        ("reinforce", "reward", "k2", 0.0),
        ("reinforce", "reward", "k3", 0.0),
        ("grpo", "loss", "k3", 0.3),
        ("grpo", "loss", "exact", 0.3),
    ],
)
def test_skipping_flat_groups_leaves_the_expected_update_unchanged_with_kl(
    tmp_path, algo, placement, estimator, entropy
):
    # With beta > 0 and the KL in the loss, a row whose advantage is 0 still carries -beta * KL (and the
    # entropy bonus): skipping it would weight the KL by the share of groups whose rewards vary (the
    # expected update moved by 5-7% of its entries).  Groups of 2 over these rewards are often flat.
    deltas = []
    for skip in (False, True):
        trainer, policy = make_trainer(
            tmp_path / f"{skip}",
            FOUR,
            REWARDS4,
            LOGITS4,
            G=2,
            algo=algo,
            **{
                "kl.beta": 0.1,
                "kl.placement": placement,
                "kl.estimator": estimator,
                "loss.entropy_coef": entropy,
                "update.skip_zero_advantage": skip,
            },
        )
        trainer.reference.policy.logits.data = torch.tensor(REF_LOGITS, dtype=torch.float64)
        deltas.append(expected_update(trainer, policy, G=2)[0])
    assert deltas[0].abs().max() > 1e-3
    assert torch.allclose(deltas[0], deltas[1], atol=1e-12)


def test_skipping_still_skips_where_the_gradient_is_zero(tmp_path):
    # beta 0, no entropy bonus: a flat group contributes nothing, so it is left out of the update.
    trainer, policy = make_trainer(
        tmp_path, FOUR, [1.0] * 4, LOGITS4, G=2, algo="grpo", **{"update.skip_zero_advantage": True}
    )
    records = group_records(policy, [0, 2])
    trainer.score(records)
    assert trainer.learning_signal(records)[0] is None
    trainer, policy = make_trainer(
        tmp_path / "kl",
        FOUR,
        [1.0] * 4,
        LOGITS4,
        G=2,
        algo="grpo",
        **{"update.skip_zero_advantage": True, "kl.beta": 0.1},
    )
    trainer.score(records)
    assert trainer.learning_signal(records)[0].size == 2  # the KL term still needs both rows


# --------------------------------------------------------------------------- what the KL term optimises


def divergence_gradients(logits, ref_logits) -> dict[str, torch.Tensor]:
    """True gradients wrt the policy logits z of KL(pi || ref), KL(ref || pi) and E_pi[(log pi/ref)^2 / 2]."""
    out = {}
    for name in ("kl_pi_ref", "kl_ref_pi", "half_sq_log_ratio"):
        z = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        logp, logq = torch.log_softmax(z, -1), torch.log_softmax(torch.tensor(ref_logits, dtype=torch.float64), -1)
        value = {
            "kl_pi_ref": (logp.exp() * (logp - logq)).sum(),
            "kl_ref_pi": (logq.exp() * (logq - logp)).sum(),
            "half_sq_log_ratio": (logp.exp() * 0.5 * (logp - logq) ** 2).sum(),
        }[name]
        value.backward()
        out[name] = z.grad
    return out


def test_k1_differentiated_at_policy_samples_has_zero_expected_gradient():
    # E_pi[d/dz k1] = E_pi[d/dz log pi] = sum_y d/dz pi(y) = d/dz 1 = 0: k1 in the loss does nothing on average.
    from veriloop.algorithms import kl_estimate

    z = torch.tensor(LOGITS4, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(z, -1)
    ref = torch.log_softmax(torch.tensor(REF_LOGITS, dtype=torch.float64), -1)
    expected = (logp.exp().detach() * kl_estimate(logp, ref, "k1")).sum()  # samples from pi, estimator differentiated
    expected.backward()
    assert torch.allclose(z.grad, torch.zeros(4, dtype=torch.float64), atol=1e-15)


def test_k1_in_the_loss_is_refused_with_the_reason(tmp_path):
    from veriloop.config import ConfigError

    with pytest.raises(ConfigError, match="zero expected gradient"):
        build_config(TrainConfig, {}, {"kl.estimator": "k1", "kl.placement": "loss", "kl.beta": 0.1})
    build_config(TrainConfig, {}, {"kl.estimator": "k1", "kl.placement": "reward"})  # where it works


@pytest.mark.parametrize(
    "estimator, divergence",
    [("k2", {"kl_pi_ref": 1.0}), ("k3", {"kl_ref_pi": 1.0}), ("exact", {"kl_pi_ref": 1.0})],
)
def test_kl_in_the_loss_optimises(tmp_path, estimator, divergence):
    # All rewards equal: advantages are 0 and only -beta * KL moves the logits.  SGD lr 1, one pass:
    # delta z = -beta * E_pi[d/dz k(y)].  k2 gives the gradient of KL(pi || ref); k3 that of KL(ref || pi)
    # (d/dz k3 = (1 - ref/pi) d log pi, and E_pi[-(ref/pi) d log pi] = -sum ref d log pi); exact, KL(pi || ref).
    beta = 0.5
    trainer, policy = make_trainer(
        tmp_path, FOUR, [1.0] * 4, LOGITS4, G=2, algo="grpo", **{"kl.beta": beta, "kl.estimator": estimator}
    )
    trainer.reference.policy.logits.data = torch.tensor(REF_LOGITS, dtype=torch.float64)
    delta, _ = expected_update(trainer, policy, G=2)
    grads = divergence_gradients(LOGITS4, REF_LOGITS)
    want = -beta * sum(w * grads[name] for name, w in divergence.items())
    assert torch.allclose(delta, want, atol=1e-12)
    others = [-beta * g for name, g in grads.items() if name not in divergence]
    assert all(not torch.allclose(delta, o, atol=1e-4) for o in others)


@pytest.mark.parametrize(
    "estimator, divergence",
    [
        ("k1", {"kl_pi_ref": 1.0}),
        ("k2", {"half_sq_log_ratio": 1.0, "kl_pi_ref": -1.0}),
        ("k3", {"kl_pi_ref": 1.0, "kl_ref_pi": -1.0}),
    ],
)
def test_kl_in_the_reward_optimises(tmp_path, estimator, divergence):
    # All task rewards 0; the reward is -beta * k(y) and REINFORCE (no baseline, pg objective) gives
    # delta z = -beta * E_pi[k(y) d log pi(y)] = -beta * (d E_pi[k] - E_pi[d k]).  k1: d KL(pi||ref) exactly;
    # k2: d E_pi[(log r)^2 / 2] - d KL(pi||ref), no divergence; k3 (E_pi[k3] = KL(pi||ref), E_pi[d k3] =
    # d KL(ref||pi)): d KL(pi||ref) - d KL(ref||pi).  Only k1 optimises a KL when placed in the reward.
    beta = 0.5
    trainer, policy = make_trainer(
        tmp_path,
        FOUR,
        [0.0] * 4,
        LOGITS4,
        G=2,
        algo="reinforce",
        **{"kl.beta": beta, "kl.estimator": estimator, "kl.placement": "reward"},
    )
    trainer.reference.policy.logits.data = torch.tensor(REF_LOGITS, dtype=torch.float64)
    delta, _ = expected_update(trainer, policy, G=2)
    grads = divergence_gradients(LOGITS4, REF_LOGITS)
    want = -beta * sum(w * grads[name] for name, w in divergence.items())
    assert torch.allclose(delta, want, atol=1e-12)
    if estimator != "k1":
        assert not torch.allclose(delta, -beta * grads["kl_pi_ref"], atol=1e-4)


def test_batch_mean_baseline_includes_the_sample_and_is_biased(tmp_path):
    # The batch mean contains the sample itself: the expected update is (1 - 1/G) times the gradient.
    trainer, policy = make_trainer(
        tmp_path, FOUR, REWARDS4, LOGITS4, G=3, algo="reinforce", **{"advantage.baseline": "batch"}
    )
    delta, _ = expected_update(trainer, policy, G=3)
    assert torch.allclose(delta, (1 - 1 / 3) * true_gradient(LOGITS4, REWARDS4), atol=1e-12)


@pytest.mark.parametrize("G", [2, 3, 4])
def test_group_mean_that_includes_the_sample_scales_the_gradient_by_1_minus_1_over_g(tmp_path, G):
    # Seeds 4.3: E[(r_i - mean r) grad log p_i] = (1 - 1/G) grad J.  Dr. GRPO centres without the std.
    trainer, policy = make_trainer(
        tmp_path, FOUR, REWARDS4, LOGITS4, G=G, algo="dr_grpo", **{"loss.aggregation": "seq-mean-token-mean"}
    )
    delta, _ = expected_update(trainer, policy, G=G)
    grad = true_gradient(LOGITS4, REWARDS4)
    assert torch.allclose(delta, (1 - 1 / G) * grad, atol=1e-12)
    assert not torch.allclose(delta, grad, atol=1e-3)  # and so it is not the gradient itself


def test_leave_one_out_is_unbiased(tmp_path):
    trainer, policy = make_trainer(tmp_path, FOUR, REWARDS4, LOGITS4, G=3, algo="rloo", **{"kl.beta": 0.0})
    delta, _ = expected_update(trainer, policy, G=3)
    assert torch.allclose(delta, true_gradient(LOGITS4, REWARDS4), atol=1e-12)


def test_std_normalised_group_advantages_are_not_a_scaled_gradient(tmp_path):
    # GRPO's division by the random group std: the expectation is no constant multiple of grad J.
    trainer, policy = make_trainer(
        tmp_path, FOUR, [1.0, 0.0, 0.5, 0.0], LOGITS4, G=3, algo="grpo", **{"update.inner_updates": 1}
    )
    delta, _ = expected_update(trainer, policy, G=3)
    grad = true_gradient(LOGITS4, [1.0, 0.0, 0.5, 0.0])
    ratios = delta / grad
    assert (ratios.max() - ratios.min()).item() > 1e-3


def test_expected_k3_equals_the_exact_kl(tmp_path):
    # The learner's KL metric is the mean k3 of the sampled tokens; over every group its
    # expectation is KL(pi || ref) exactly.  With estimator "exact" it is that value every time.
    ref_logits = REF_LOGITS
    for estimator in ("k3", "exact"):
        trainer, policy = make_trainer(
            tmp_path / estimator,
            FOUR,
            REWARDS4,
            LOGITS4,
            G=2,
            algo="grpo",
            **{"kl.beta": 0.05, "kl.estimator": estimator},
        )
        trainer.reference.policy.logits.data = torch.tensor(ref_logits, dtype=torch.float64)
        _, mean_kl = expected_update(trainer, policy, G=2, stat="kl")
        exact = kl_exact(
            torch.log_softmax(policy.logits.detach(), -1), torch.log_softmax(trainer.reference.policy.logits, -1)
        )
        # k3 is unbiased; all-equal groups (advantage 0) still carry the KL term here (skip off).
        assert mean_kl == pytest.approx(exact.item(), abs=1e-12)


def test_candidate_policy_trains_through_the_whole_loop(tmp_path):
    trainer, policy = make_trainer(
        tmp_path,
        FOUR,
        REWARDS4,
        [0.0] * 4,
        G=8,
        algo="grpo",
        **{"steps": 30, "update.inner_updates": 3, "optim.lr": 0.15, "kl.beta": 0.05, "kl.estimator": "exact"},
    )
    trainer.train()
    p = policy.probs()
    assert p[0] + p[2] > 0.8  # mass moved to the candidates the reward accepts
    reloaded = CandidatePolicy.load(tmp_path / "run" / "final")
    assert torch.allclose(reloaded.probs(), p)


def one_update(trainer, policy, group):
    start = policy.logits.detach().clone()
    records = group_records(policy, group)
    trainer.score(records)
    lb = trainer.learning_signal(records)[0]
    trainer.learner.update(lb, trainer.kl_control.beta, torch.Generator().manual_seed(0))
    return policy.logits.detach() - start


def test_dpo_step_at_the_reference_is_beta_over_two_per_pair(tmp_path):
    # At pi = pi_ref the margin is 0, so d/dz [-log sigma(beta * margin)] = -beta/2 * (e_c - e_r) for
    # softmax logits (grad log pi(k) = e_k - p).  Pairs zip accepted with rejected: (0, 1) and (2, 3);
    # the loss is the mean over pairs, so SGD lr 1 moves each logit by beta/4 (two pairs).
    beta = 0.2
    trainer, policy = make_trainer(
        tmp_path, FOUR, REWARDS4, LOGITS4, G=4, algo="dpo", **{"loss.dpo_beta": beta, "optim.lr": 1.0}
    )
    delta = one_update(trainer, policy, [0, 1, 2, 3])
    assert torch.allclose(delta, torch.tensor([beta / 4, -beta / 4, beta / 4, -beta / 4], dtype=torch.float64))


def test_entropy_bonus_gradient(tmp_path):
    # All rewards equal: advantages 0, only the bonus moves the logits: dH/dz = -p * (log p + H).
    trainer, policy = make_trainer(tmp_path, FOUR, [1.0] * 4, LOGITS4, G=2, **{"loss.entropy_coef": 1.0})
    p = policy.probs()
    H = -(p * p.log()).sum()
    delta = one_update(trainer, policy, [0, 2])
    assert torch.allclose(delta, -p * (p.log() + H))


def test_truncated_importance_sampling_corrects_a_rollout_engine_mismatch(tmp_path):
    # The rollout engine's log-probs differ from the learner's by `offsets` (as a bf16 or vLLM
    # sampler's would).  With loss.tis_cap the ratio's denominator is the learner's own old
    # log-prob (ratio 1 on the first pass) and each token is weighted by min(pi_old / pi_engine, cap):
    # w = [e^-0.5, min(e^1, 2) = 2, 1, e^-1].  REINFORCE (raw reward), pg objective, mean over the
    # 4 completions, SGD lr 1: delta z = 1/4 * sum_i w_i r_i (e_k_i - p).
    trainer, policy = make_trainer(
        tmp_path, FOUR, REWARDS4, LOGITS4, G=4, algo="reinforce", **{"loss.tis_cap": 2.0, "kl.beta": 0.0}
    )
    p = policy.probs()
    group, offsets = [0, 2, 1, 3], [0.5, -1.0, 0.0, 1.0]
    records = group_records(policy, group)
    for rec, off in zip(records, offsets):
        rec.behavior_logprobs = [rec.behavior_logprobs[0] + off]
    trainer.score(records)
    start = policy.logits.detach().clone()
    stats = trainer.learner.update(trainer.learning_signal(records)[0], 0.0, torch.Generator().manual_seed(0))
    w = [math.exp(-0.5), 2.0, 1.0, math.exp(-1.0)]
    expected = sum(w[i] * REWARDS4[k] * (torch.eye(4, dtype=torch.float64)[k] - p) for i, k in enumerate(group)) / 4
    assert torch.allclose(policy.logits.detach() - start, expected)
    assert stats["logprob_mismatch"] == pytest.approx((0.5 + 1.0 + 0.0 + 1.0) / 4)  # mean |learner - engine|
    assert stats["tis_weight"] == pytest.approx(sum(w) / 4)


# --------------------------------------------------------------------------- the KL on reused samples

BEHAVIOUR_LOGITS = [-0.4, 0.6, 0.1, 0.3]  # the policy that sampled the batch (an earlier version)


def expected_update_from(trainer, policy, G, behaviour_logits, stat=None):
    """``expected_update`` when the records were sampled by another policy (``behaviour_logits``): every group
    is weighted by its probability under that policy, and its records carry that policy's log-probs.  This is
    what the second pass of ``update.inner_updates`` (and every pass under ``rollout.lag``) sees: the batch is
    the behaviour policy's, the learner's policy has moved away from it."""
    lb_logp = torch.log_softmax(torch.tensor(behaviour_logits, dtype=torch.float64), -1)
    K, start = len(policy.candidates), policy.logits.detach().clone()
    mean_delta, mean_stat, gen = torch.zeros(K, dtype=torch.float64), 0.0, torch.Generator().manual_seed(0)
    for group in itertools.product(range(K), repeat=G):
        weight = float(torch.prod(lb_logp.exp()[list(group)]))
        records = group_records(policy, group)
        for rec, k in zip(records, group):
            rec.behavior_logprobs = [float(lb_logp[k])]
        trainer.score(records)
        stats = trainer.learner.update(trainer.learning_signal(records)[0], trainer.kl_control.beta, gen)
        mean_delta += weight * (policy.logits.detach() - start)
        mean_stat += weight * stats.get(stat, 0.0) if stat else 0.0
        policy.logits.data.copy_(start)
    return mean_delta, mean_stat


@pytest.mark.parametrize("weighted", [True, False])
def test_importance_weighted_kl_estimates_the_current_policys_kl_on_reused_samples(tmp_path, weighted):
    # Samples of the behaviour policy b, current policy pi != b (a second pass of inner_updates, or a lagged
    # batch).  The learner's KL metric is the mean k3 of the sampled tokens: E_b[w k3] = KL(pi || ref) exactly
    # with w = pi/b; the plain mean estimates E_b[k3], which is not the KL of the policy being trained.
    trainer, policy = make_trainer(
        tmp_path,
        FOUR,
        REWARDS4,
        LOGITS4,
        G=2,
        algo="grpo",
        **{"kl.beta": 0.05, "kl.estimator": "k3", "kl.importance_weighted": weighted, "update.inner_updates": 2},
    )
    trainer.reference.policy.logits.data = torch.tensor(REF_LOGITS, dtype=torch.float64)
    _, mean_kl = expected_update_from(trainer, policy, 2, BEHAVIOUR_LOGITS, stat="kl")
    logp = torch.log_softmax(policy.logits.detach(), -1)
    ref = torch.log_softmax(torch.tensor(REF_LOGITS, dtype=torch.float64), -1)
    exact = kl_exact(logp, ref).item()
    behaviour = torch.log_softmax(torch.tensor(BEHAVIOUR_LOGITS, dtype=torch.float64), -1)
    from veriloop.algorithms import kl_estimate

    plain = (behaviour.exp() * kl_estimate(logp, ref, "k3")).sum().item()
    assert abs(plain - exact) > 0.01  # the two differ here: the test can tell them apart
    assert mean_kl == pytest.approx(exact if weighted else plain, abs=1e-12)


@pytest.mark.parametrize("weighted", [True, False])
def test_importance_weighted_kl_gradient_is_the_on_policy_estimators(tmp_path, weighted):
    # All rewards equal: only -beta * KL moves the logits.  SGD lr 1, one pass: delta z = -beta * E_b[w d k2].
    # The weight is detached, so E_b[w d k2] = E_pi[d k2] = d KL(pi || ref), what k2 gives on fresh samples
    # (test_kl_in_the_loss_optimises); unweighted, E_b[d k2] is no divergence's gradient at pi.
    beta = 0.5
    trainer, policy = make_trainer(
        tmp_path,
        FOUR,
        [1.0] * 4,
        LOGITS4,
        G=2,
        algo="grpo",
        **{"kl.beta": beta, "kl.estimator": "k2", "kl.importance_weighted": weighted},
    )
    trainer.reference.policy.logits.data = torch.tensor(REF_LOGITS, dtype=torch.float64)
    delta, _ = expected_update_from(trainer, policy, 2, BEHAVIOUR_LOGITS)
    want = -beta * divergence_gradients(LOGITS4, REF_LOGITS)["kl_pi_ref"]
    assert torch.allclose(delta, want, atol=1e-12) == weighted
    if not weighted:
        assert not torch.allclose(delta, want, atol=1e-3)


def test_importance_weighted_kl_is_refused_where_it_cannot_apply(tmp_path):
    from veriloop.config import ConfigError

    with pytest.raises(ConfigError, match="no sampled token to reweight"):
        build_config(TrainConfig, {}, {"kl.importance_weighted": True, "kl.estimator": "exact"})
    with pytest.raises(ConfigError, match="use kl.placement=loss"):
        build_config(TrainConfig, {}, {"algo": "reinforce", "kl.importance_weighted": True})
