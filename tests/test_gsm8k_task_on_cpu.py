"""GSM8K as a task: the shipped copy loads, splits are the dataset's, SFT demonstrations are its solutions."""

import random

import pytest

from veriloop.config import build_config
from veriloop.tasks import get_task
from veriloop.tasks.jsonl import DatasetError
from veriloop.training.config import TrainConfig
from veriloop.verifiers import get


def test_shipped_gsm8k_loads_with_its_licence():
    task = get_task("gsm8k")
    # validation: the train rows whose question hashes into the first 5%, never drawn for training
    assert len(task.train) + len(task.validation()) == 7473 and len(task.heldout()) == 1319
    assert 300 < len(task.validation()) < 450 and not {p.id for p in task.train} & {p.id for p in task.validation()}
    assert task.train[0].prompt.startswith("Natalia sold clips") and task.train[0].reference.endswith("#### 72")
    from veriloop.tasks.gsm8k import DATA_DIR

    assert "MIT License" in (DATA_DIR / "LICENSE").read_text()
    p = task.train_batch(1, random.Random(0))[0]
    assert get("gsm8k").verify(task.teacher_completion(p, random.Random(0)), p.reference).score == 1.0


def test_gsm8k_from_the_config_tree(tmp_path):
    cfg = build_config(TrainConfig, {}, {"task.name": "gsm8k", "verifier": "gsm8k", "task.heldout_size": 50})
    task = cfg.task.build()
    assert len(task.heldout()) == 50 and cfg.task.eval_verifiers() == {"outcome": "gsm8k"}


def test_bad_gsm8k_file_names_the_line(tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"question": "q", "answer": "no final line"}\n')
    with pytest.raises(DatasetError, match=r"train.jsonl:1: .*####"):
        get_task("gsm8k", data=str(bad))


def test_trainer_runs_on_gsm8k_with_its_verifier(tmp_path):
    from veriloop.rollout.records import RecordStore
    from veriloop.training.trainer import Trainer

    # a new built-in model with a context that holds GSM8K's prompts (the base's 256 positions do not)
    settings = {
        "policy": "builtin:init",
        "model.max_positions": 1280,
        "task.name": "gsm8k",
        "verifier": "gsm8k",
        "run_dir": str(tmp_path),
        "steps": 1,
        "rollout.prompts_per_step": 2,
        "rollout.group_size": 2,
        "sampling.max_new_tokens": 8,
        "kl.beta": 0.0,
    }
    Trainer(build_config(TrainConfig, {}, settings), progress=False).train()
    records = RecordStore(tmp_path / "rollouts").read(1)
    assert len(records) == 4 and all(r.verifier == "gsm8k@5" and r.reward == 0.0 for r in records)
