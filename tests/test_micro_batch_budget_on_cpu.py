"""Micro-batches from a memory budget (update.micro_batch_memory_mib, when update.micro_batch_size is 0): the most
rows whose estimated activations fit, resolved before the run directory records the config."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from veriloop.config import build_config
from veriloop.models.memory import body_bytes_per_token, micro_batch_bytes, rows_within
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer

CONTRACT = {"hidden": 256, "layers": 4, "vocab": 512, "intermediate": 1024, "kv_dim": 256}
shapes = st.fixed_dictionaries(
    {
        "hidden": st.sampled_from([32, 128, 896]),
        "layers": st.integers(1, 24),
        "vocab": st.sampled_from([100, 512, 32_000, 151_936]),
        "intermediate": st.sampled_from([64, 1024, 4864]),
        "kv_dim": st.sampled_from([32, 128, 256]),
    }
)


def test_the_contract_models_estimate_is_its_measured_memory_per_row():
    # the contract's model: micro-batches of 8 and 64 rows of 72 tokens peaked at 570 and 1,119 MiB (9.8 per row)
    per_row = (
        micro_batch_bytes(CONTRACT, 4, False, 64, 72, 64) - micro_batch_bytes(CONTRACT, 4, False, 8, 72, 64)
    ) / 56
    assert 9.5 < per_row / 2**20 < 11.5


@given(
    shapes,
    st.floats(1, 8192),
    st.booleans(),
    st.integers(1, 512),
    st.integers(1, 512),
    st.sampled_from([2, 4]),
)
def test_rows_within_is_the_most_rows_that_fit(shape, budget_mib, checkpointing, prompt, new, dtype_bytes):
    budget, length = budget_mib * 2**20, prompt + new
    rows = rows_within(budget, shape, dtype_bytes, checkpointing, length, new)
    assert rows >= 1
    cost = lambda r: micro_batch_bytes(shape, dtype_bytes, checkpointing, r, length, new)  # noqa: E731
    assert rows == 1 or cost(rows) <= budget
    assert cost(rows + 1) > budget
    assert rows_within(2 * budget, shape, dtype_bytes, checkpointing, length, new) >= rows  # more memory, more rows


def test_per_token_bytes_by_hand():
    layer = 12 * 256 + 4 * 256 + 5 * 1024  # 9,216 values per token and layer
    assert body_bytes_per_token(CONTRACT, 4, False) == (4 * layer + 256) * 4 == 148_480
    # checkpointing: each layer's input, plus one layer's full set while it is recomputed
    assert body_bytes_per_token(CONTRACT, 4, True) == (4 * 256 + layer + 256) * 4 == 41_984


def run(tmp_path, name, **options):
    base = {
        "policy": "builtin:base",
        "run_dir": str(tmp_path / name),
        "steps": 1,
        "rollout.prompts_per_step": 8,
        "rollout.group_size": 4,
        "sampling.max_new_tokens": 16,
        "save_rollouts": False,
        "update.skip_zero_advantage": False,  # every row is updated, whatever the rewards and lengths
        "update.mask_truncated": False,
        "device": "cpu",
    }
    return Trainer(build_config(TrainConfig, {}, {**base, **options}), progress=False)


def test_the_run_resolves_the_size_and_its_config_records_it(tmp_path):
    small, large = run(tmp_path, "small", **{"update.micro_batch_memory_mib": 8}), run(tmp_path, "large")
    try:
        assert 1 <= small.cfg.update.micro_batch_size < large.cfg.update.micro_batch_size
        saved = yaml.safe_load((tmp_path / "small" / "config.yaml").read_text())
        assert saved["update"]["micro_batch_size"] == small.cfg.update.micro_batch_size
        row = small.train_step(1)
        assert row["update_records"] > 0
    finally:
        small.close()
        large.close()
    explicit = run(tmp_path, "explicit", **{"update.micro_batch_size": 5, "update.micro_batch_memory_mib": 1})
    try:
        assert explicit.cfg.update.micro_batch_size == 5  # a size given is used as given
    finally:
        explicit.close()
