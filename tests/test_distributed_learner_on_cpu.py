"""learner.strategy ddp|fsdp2: W spawned rank processes (gloo, 127.0.0.1) give the 1-process update.

Not bit for bit: the ranks' gradients are summed in another order than one process accumulates them.
The tolerance therefore comes from a float64 twin of every comparison (``close_to_one_process``).
Every test has a wall-clock bound (pytest-timeout) besides the learner's own ``learner.timeout_s``.
"""

import copy
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from veriloop.config import build_config
from veriloop.registry import LEARNERS
from veriloop.training.config import TrainConfig
from veriloop.training.distributed.ranks import RankShare
from veriloop.training.distributed.strategies import DDPLearner, DistributedLearner, FSDP2Learner
from veriloop.training.loop.critic import Critic
from veriloop.training.loop.learner import LocalLearner
from veriloop.training.trainer import Trainer

TINY = {
    "policy": "builtin:init",
    "model.hidden_size": 32,
    "model.intermediate_size": 64,
    "model.num_layers": 2,
    "model.num_heads": 2,
    "rollout.prompts_per_step": 3,
    "rollout.group_size": 3,
    "sampling.max_new_tokens": 8,
    "verifier": "test-digit-share",
    "optim.lr": 0.5,
    "device": "cpu",
    "task.arithmetic.heldout_size": 8,
    "update.micro_batch_size": 2,
    "kl.beta": 0.05,
    "kl.placement": "loss",
    "update.inner_updates": 1,
    "optim.name": "sgd",
    "update.mask_truncated": False,
}
# (mask_truncated false: a random tiny policy's completions are nearly all cut; the run, not truncation, is tested)
ADAMW = {"optim.name": "adamw", "optim.lr": 1e-2}  # where a test checks the optimizer's state
BETA, UPDATES = 0.05, 2
pytestmark = pytest.mark.timeout(150)  # a hang fails the test (besides each learner's learner.timeout_s)


@pytest.fixture
def groups():
    """Start DistributedLearners; every one is closed at the end of the test."""
    started = []

    def start(policy, cfg, critic=None, **kw):
        started.append(DistributedLearner(policy, cfg, critic=critic, **kw))
        return started[-1]

    yield start
    for learner in started:
        learner.close()


def setup(tmp_path, **over):
    """A trainer's start policy, critic (gae) and one learning batch of 9 rows, as the trainer makes them."""
    cfg = build_config(TrainConfig, {}, {**TINY, "run_dir": str(tmp_path / "run"), **over})
    trainer = Trainer(cfg, progress=False)
    records, _, _ = trainer.collector.collect(1, 0)
    return cfg, trainer.policy, trainer.learner.critic, trainer.learning_signal(records).batch


def with_learner(cfg, **over) -> TrainConfig:
    flat = {"learner.strategy": "ddp", "learner.world_size": 2, "learner.timeout_s": 60, **over}
    return build_config(TrainConfig, {}, {**TINY, "run_dir": cfg.run_dir, **_overrides(cfg), **flat})


def _overrides(cfg) -> dict:
    u, a = cfg.update, cfg.loss
    o = cfg.optim
    return {
        "update.mini_batches": u.mini_batches,
        "loss.aggregation": a.aggregation,
        "lora.r": cfg.lora.r,
        "advantage.estimator": cfg.advantage.estimator,
        "optim.grad_clip": o.grad_clip,
        "optim.name": o.name,
        "optim.lr": o.lr,
        "dtype": cfg.dtype,
    }


def run(learner, lb, critic_update=None, updates=UPDATES, seed=7) -> list[dict]:
    """``updates`` trainer updates: the learner's passes, then the critic's from the same generator."""
    gen, out = torch.Generator().manual_seed(seed), []
    for _ in range(updates):
        stats = learner.update(lb, BETA, gen)
        if critic_update is not None:
            stats.update(critic_update(lb.batch, lb.returns, lb.old_values, gen))
        out.append(stats)
    return out


def local(policy, cfg, lb, critic=None, dtype=None, **over):
    """The 1-process run on copies; the updated (policy, critic, stats)."""
    policy, critic = copy.deepcopy(policy), copy.deepcopy(critic)
    if dtype is not None:
        policy.model.to(dtype)
    cfg = build_config(TrainConfig, {}, {**TINY, "run_dir": cfg.run_dir, **_overrides(cfg), **over})
    if critic is not None:
        critic.cfg = cfg
    stats = run(LocalLearner(policy, cfg), lb, critic.update if critic is not None else None)
    return policy, critic, stats


def distributed(groups, policy, cfg, lb, critic=None, dtype=None, **kw):
    policy, critic = copy.deepcopy(policy), copy.deepcopy(critic)
    if dtype is not None:
        policy.model.to(dtype)
    group = groups(policy, cfg, critic, **kw)
    stats = run(group, lb, group.critic_update if critic is not None else None)
    return policy, critic, stats, group


def noise_of(one: torch.nn.Module, split: torch.nn.Module, dtype=torch.float32) -> float:
    """Reduction-order noise: how far another exact split moves the 1-process result, and at least one
    rounding (eps of ``dtype``) of the largest weight (the smallest difference a max over weights sees)."""
    largest = max(t.abs().max().item() for t in one.state_dict().values() if t.is_floating_point())
    return max(max_diff(split, one), torch.finfo(dtype).eps * largest)


def max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(
        (x.double() - y.double()).abs().max().item() for x, y in zip(a.state_dict().values(), b.state_dict().values())
    )


CASES = [  # (aggregation, mini-batches of the 9 rows): 9 / 5 -> a 1-row mini-batch, where rank 1 has no row
    ("seq-mean-token-mean", 5),
    ("token-mean", 2),
    ("seq-mean-token-sum-norm", 3),
]


@pytest.mark.parametrize("aggregation,mini_batches", CASES)
def test_ddp_two_ranks_is_one_process_up_to_float_rounding(tmp_path, groups, aggregation, mini_batches):
    """The tolerance, from a float64 twin of each run.  Summing the gradient in another order (2 ranks, or
    1 process with another micro-batch split) is exact in exact arithmetic: in float64 both land within
    ~1e-17 of the 1-process result.  So the float32 reduction-order noise of this update is measured as
    ``noise = |split32 - one32|`` (1 process, micro-batches of 1 row instead of 2), and the 2-rank float32
    result must be within 10 x noise of the 1-process one.  (Not |one32 - one64|: that is ~1e-3 here,
    dominated by tokens that cross the PPO clip boundary between float32 and float64, not by sums.)
    SGD: AdamW would turn rounding noise in gradients that cancel to ~0 into steps of +-lr.  With KL in
    the loss, 9 rows (odd), the PPO critic (whose head computes in float32: no float64 twin, same
    split-noise bound), and all-reduced statistics equal to the 1-process ones."""
    cfg, policy, critic, lb = setup(
        tmp_path, **{"loss.aggregation": aggregation, "update.mini_batches": mini_batches, "advantage.estimator": "gae"}
    )
    assert lb.size == 9 and lb.ref_logprobs is not None and critic is not None
    one32, critic32, stats32 = local(policy, cfg, lb, critic)
    split32, critic_split, _ = local(policy, cfg, lb, critic, **{"update.micro_batch_size": 1})
    one64, _, _ = local(policy, cfg, lb, dtype=torch.float64)
    split64, _, _ = local(policy, cfg, lb, dtype=torch.float64, **{"update.micro_batch_size": 1})
    dcfg = with_learner(cfg)
    two32, dcritic, dstats, _ = distributed(groups, policy, dcfg, lb, critic)
    two64, *_ = distributed(groups, policy, dcfg, lb, dtype=torch.float64)
    assert max_diff(two64.model, one64.model) < 1e-12 and max_diff(split64.model, one64.model) < 1e-12
    noise = noise_of(one32.model, split32.model)
    # the figures of docs/guides/scale-out.md: `pytest -s tests/test_distributed_learner_on_cpu.py` prints them
    print(
        f"\n{aggregation}: float64 2 ranks vs 1 {max_diff(two64.model, one64.model):.1e}, float32 "
        f"{max_diff(two32.model, one32.model):.1e}, noise bound {noise:.2e}"
    )
    assert noise < 1e-5
    assert max_diff(two32.model, one32.model) <= 10 * noise
    assert max_diff(dcritic.model, critic32.model) <= 10 * noise_of(critic32.model, critic_split.model)
    for mine, want in zip(dstats, stats32):  # all-reduced statistics are the 1-process ones
        assert mine.keys() == want.keys()
        for key in want:
            if key == "token_values":  # every rank's rows gathered: the 1-process values, row by row
                for name, rows in want[key].items():
                    assert mine[key][name].keys() == rows.keys(), name
                    for row, values in rows.items():
                        assert mine[key][name][row] == pytest.approx(values, rel=1e-3, abs=1e-4), (name, row)
                continue
            assert mine[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


class PerRankNormaliser(RankShare):
    """The bug the global normaliser prevents: each rank's token-mean over its own share, averaged over the
    ranks (what DDP makes of a per-rank loss).  Gradients scaled by tokens(mini-batch) / tokens(share) / W."""

    def micro_batches(self, learner, batch, mb):
        mask = batch.completion_mask
        self.scale = float(mask[mb].sum()) / max(float(mask[self.share(mb)].sum()), 1.0) / self.world
        return super().micro_batches(learner, batch, mb)

    def sync_grads(self, model):
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(self.scale)
        super().sync_grads(model)


def test_a_per_rank_normaliser_fails_the_same_comparison(tmp_path, groups):
    cfg, policy, _, lb = setup(tmp_path, **{"loss.aggregation": "token-mean", "update.mini_batches": 2})
    one32, _, _ = local(policy, cfg, lb)
    split32, _, _ = local(policy, cfg, lb, **{"update.micro_batch_size": 1})
    wrong, *_ = distributed(groups, policy, with_learner(cfg), lb, rank_share=PerRankNormaliser)
    noise = noise_of(one32.model, split32.model)
    print(
        f"\nper-rank normaliser: {max_diff(wrong.model, one32.model):.1e} = "
        f"{max_diff(wrong.model, one32.model) / noise:,.0f} x the noise bound"
    )
    assert max_diff(wrong.model, one32.model) > 1000 * noise


def test_fsdp2_equals_ddp_bit_for_bit_and_their_checkpoints_agree(tmp_path, groups):
    """Gradient clipping off: the sharded grad norm is summed in another order (so its statistic differs in
    the last bits).  Every weight and every tensor of the saved optimizer state is equal."""
    cfg, policy, _, lb = setup(tmp_path, **{"update.mini_batches": 2, "optim.grad_clip": 0.0, **ADAMW})
    ddp, _, _, ddp_group = distributed(groups, policy, with_learner(cfg), lb)
    fsdp, _, _, fsdp_group = distributed(groups, policy, with_learner(cfg, **{"learner.strategy": "fsdp2"}), lb)
    a, b = ddp.model.state_dict(), fsdp.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name, group in (("ddp", ddp_group), ("fsdp2", fsdp_group)):
        (tmp_path / name).mkdir()
        group.save(tmp_path / name)
    assert not (tmp_path / "fsdp2" / "optimizer.pt").exists()  # fsdp2's ranks wrote shards: nothing was gathered
    one = LocalLearner(copy.deepcopy(policy), cfg)  # the shards read whole into one process (no process group)
    one.load(tmp_path / "fsdp2")
    sa, sb = torch.load(tmp_path / "ddp" / "optimizer.pt", weights_only=True), one.optimizer.state_dict()
    assert dict(one.policy.model.named_parameters()).keys() == dict(fsdp.model.named_parameters()).keys()
    assert all(torch.equal(p, b[n]) for n, p in one.policy.model.named_parameters())
    assert [g["params"] for g in sa["param_groups"]] == [g["params"] for g in sb["param_groups"]]
    assert sa["state"].keys() == sb["state"].keys()
    for i, state in sa["state"].items():
        assert all(torch.equal(torch.as_tensor(v), torch.as_tensor(sb["state"][i][k])) for k, v in state.items())


def test_lora_ddp_trains_only_the_adapters_within_tolerance(tmp_path, groups, monkeypatch):
    from veriloop.training.distributed import strategies as dist_module

    cfg, policy, _, lb = setup(tmp_path, **{"lora.r": 4, "lora.alpha": 8, "update.mini_batches": 2})
    travelled = []
    assemble = dist_module.assemble_into
    monkeypatch.setattr(
        dist_module,
        "assemble_into",
        lambda tensors, handles, **kw: (
            travelled.append({p.name for h in handles for p in h.pieces}),
            assemble(tensors, handles, **kw),
        )[1],
    )
    one32, _, _ = local(policy, cfg, lb)
    split32, _, _ = local(policy, cfg, lb, **{"update.micro_batch_size": 1})
    two32, *_ = distributed(groups, policy, with_learner(cfg), lb)
    adapters = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    assert travelled and all(names == adapters for names in travelled)  # only the adapter tensors come back
    base = {n: p for n, p in policy.model.named_parameters() if not p.requires_grad}
    assert all(torch.equal(p, base[n]) for n, p in two32.model.named_parameters() if n in base)
    print(f"\nLoRA + ddp vs 1 process: {max_diff(two32.model, one32.model):.1e}")
    assert max_diff(two32.model, one32.model) <= 10 * noise_of(one32.model, split32.model)
    assert max_diff(two32.model, policy.model) > 0


def test_bfloat16_with_float32_masters_on_two_ranks(tmp_path, groups):
    """bfloat16 weights, float32 master weights (``MasterWeightsOptimizer``); the ranks sum bfloat16
    gradients as one process accumulates them: within the bfloat16 split noise of 1 process."""
    cfg, policy, _, lb = setup(tmp_path, **{"dtype": "bfloat16", "update.mini_batches": 2})
    one, _, _ = local(policy, cfg, lb)
    split, _, _ = local(policy, cfg, lb, **{"update.micro_batch_size": 1})
    two, *_ = distributed(groups, policy, with_learner(cfg), lb)
    assert next(two.model.parameters()).dtype == torch.bfloat16
    assert 0 < max_diff(two.model, policy.model)
    assert max_diff(two.model, one.model) <= 10 * noise_of(one.model, split.model, torch.bfloat16)


def test_a_rank_that_dies_fails_the_next_update_naming_it(tmp_path, groups):
    cfg, policy, _, lb = setup(tmp_path)
    group = groups(copy.deepcopy(policy), with_learner(cfg, **{"learner.timeout_s": 20}))
    run(group, lb, updates=1)
    os.kill(group.ranks.procs[1].pid, signal.SIGKILL)
    group.ranks.procs[1].join(10)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1"):
        run(group, lb, updates=1)
    assert time.monotonic() - t0 < 10
    with pytest.raises(RuntimeError, match="closed"):
        run(group, lb, updates=1)
    assert not any(p.is_alive() for p in group.ranks.procs)


class DiesInTheAllReduce(RankShare):
    """Rank 1 is killed as it reaches the gradient sum, where rank 0 then waits in the collective."""

    def sync_grads(self, model):
        if self.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        super().sync_grads(model)


def test_a_rank_that_dies_inside_a_collective_is_named_at_once(tmp_path, groups):
    cfg, policy, _, lb = setup(tmp_path)
    group = groups(copy.deepcopy(policy), with_learner(cfg, **{"learner.timeout_s": 30}), rank_share=DiesInTheAllReduce)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 died during update"):
        run(group, lb, updates=1)
    assert time.monotonic() - t0 < 10  # not the collective's 30 s timeout
    assert not any(p.is_alive() for p in group.ranks.procs)


@pytest.mark.parametrize(
    "strategy,writes,not_written", [("ddp", "optimizer.pt", "sharded"), ("fsdp2", "sharded/.metadata", "optimizer.pt")]
)
def test_save_load_resumes_exactly(tmp_path, groups, strategy, writes, not_written):
    """The ranks write the checkpoint themselves: ddp's rank 0 its optimizer.pt, fsdp2's ranks
    torch.distributed.checkpoint shards (nothing gathered).  A group resumed from it repeats the uninterrupted update
    bit for bit (the controller's copy spoiled first: the ranks read the files); a 1-process learner resumed from the
    same checkpoint (another world size) gives it up to float rounding; fsdp2's shards export a full model."""
    cfg, policy, _, lb = setup(tmp_path, **{"update.mini_batches": 2, **ADAMW})
    start = copy.deepcopy(policy)
    group = groups(start, with_learner(cfg, **{"learner.strategy": strategy}))
    run(group, lb, updates=1, seed=1)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    group.save(ckpt)
    assert (ckpt / writes).is_file() and not (ckpt / not_written).exists()
    after_first = {k: v.clone() for k, v in start.model.state_dict().items()}
    want = run(group, lb, updates=1, seed=2)
    uninterrupted = {k: v.clone() for k, v in start.model.state_dict().items()}
    for p in start.model.parameters():
        p.data.add_(1.0)
    group.load(ckpt)
    assert all(torch.equal(v, after_first[k]) for k, v in start.model.state_dict().items())
    assert run(group, lb, updates=1, seed=2) == want
    assert all(torch.equal(v, uninterrupted[k]) for k, v in start.model.state_dict().items())
    one = LocalLearner(copy.deepcopy(policy), cfg)
    one.load(ckpt)
    run(one, lb, updates=1, seed=2)
    assert max((one.policy.model.state_dict()[k] - v).abs().max() for k, v in uninterrupted.items()) < 1e-5
    if strategy == "fsdp2":
        exports_from_shards(ckpt, after_first, tmp_path)


def exports_from_shards(ckpt, after_first: dict, tmp_path) -> None:
    """`veriloop export` writes the full model from a checkpoint's shards alone."""
    # the export reads the shards, not model/: spoil model/'s weights first
    from safetensors.torch import load_file, save_file

    weights = next((ckpt / "model").glob("*.safetensors"))
    save_file({k: v + 1.0 for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
    out = subprocess.run(
        [sys.executable, "-m", "veriloop.cli", "export", str(ckpt), "--out", str(tmp_path / "hf")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    from veriloop.models.loading import load_policy

    exported = load_policy(str(tmp_path / "hf")).model.state_dict()
    assert all(torch.equal(exported[k], after_first[k]) for k in after_first if k in exported)
    out = subprocess.run(
        [sys.executable, "-m", "veriloop.cli", "export", str(tmp_path), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "no sharded/" in out.stderr


def test_the_registered_learners_and_a_main_without_a_file(tmp_path):
    cfg, policy, critic, _ = setup(tmp_path)
    assert type(LEARNERS.get(cfg.learner.strategy)(policy, cfg)) is LocalLearner  # the strategy names the class
    assert (LEARNERS.get("ddp"), LEARNERS.get("fsdp2")) == (DDPLearner, FSDP2Learner)
    assert FSDP2Learner.capabilities.shards_weights and not DDPLearner.capabilities.shards_weights
    assert isinstance(critic, Critic | type(None))
    code = (
        "from veriloop.training.distributed.groups import check_spawnable\n"
        "try:\n    check_spawnable()\nexcept RuntimeError as e:\n    print('refused:', e)"
    )
    out = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True, timeout=60)
    assert "refused:" in out.stdout and "python -" in out.stdout
    # python -c (and pytest-xdist's workers) has no __main__ file: spawn does not re-import it, nothing to refuse
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "refused" not in out.stdout, out.stdout + out.stderr


def test_the_critic_is_written_and_read_by_the_ranks(tmp_path, groups):
    """PPO's critic in a checkpoint: rank 0 writes critic.pt itself and every rank reads it (nothing through the
    pipes); resumed, the group repeats the uninterrupted update of policy and critic bit for bit."""
    cfg, policy, critic, lb = setup(tmp_path, **{"advantage.estimator": "gae", "update.mini_batches": 2, **ADAMW})
    start, start_critic = copy.deepcopy(policy), copy.deepcopy(critic)
    group = groups(start, with_learner(cfg, **{"advantage.estimator": "gae"}), start_critic)
    run(group, lb, group.critic_update, updates=1, seed=1)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    group.save(ckpt)
    assert (ckpt / "critic.pt").is_file()
    want = run(group, lb, group.critic_update, updates=1, seed=2)
    uninterrupted = {k: v.clone() for k, v in start_critic.model.state_dict().items()}
    group.load(ckpt)
    from veriloop.training.run.checkpoint import _load_data

    group.load_critic_state_dict(_load_data(ckpt / "critic.pt"))
    assert run(group, lb, group.critic_update, updates=1, seed=2) == want
    assert all(torch.equal(v, uninterrupted[k]) for k, v in start_critic.model.state_dict().items())
