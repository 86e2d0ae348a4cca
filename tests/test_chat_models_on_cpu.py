"""Instruct models: prompts through the chat template, every end token stops a completion and is recorded, the
learner scores exactly the sampled ids, and `veriloop train --policy DIR` runs a saved tiny Qwen2 on GSM8K."""

import json
import subprocess
import sys

import pytest
import torch

from veriloop.errors import InputError
from veriloop.models.loading import PromptFormat, load_policy
from veriloop.models.random_init import END_OF_TEXT, IM_END, save_random_model, train_bpe_tokenizer
from veriloop.rollout.records import RecordStore
from veriloop.rollout.sampler import SamplingParams, generate
from veriloop.tasks.config import TaskConfig

TEXTS = [f"Question {i}: what is {i} + {2 * i}? The answer is {3 * i}." for i in range(200)]


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    # 2,048 positions: GSM8K's prompts (up to ~1,000 tokens here) fit, as the trainer checks before a step
    return str(save_random_model(tmp_path_factory.mktemp("qwen2"), "qwen2", TEXTS, seed=3, max_positions=2048))


def test_prompts_go_through_the_chat_template_with_the_generation_prompt(qwen2_dir):
    policy = load_policy(qwen2_dir)
    tok = policy.tokenizer
    ids = policy.encode_prompt("What is 2 + 3?")
    assert tok.decode(ids) == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    system = load_policy(qwen2_dir, prompts=PromptFormat("auto", "Answer briefly."))
    text = tok.decode(system.encode_prompt("What is 2 + 3?"))
    assert text.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n")
    plain = load_policy(qwen2_dir, prompts=PromptFormat("none"))
    assert tok.decode(plain.encode_prompt("What is 2 + 3?")) == "What is 2 + 3?"
    with pytest.raises(InputError, match="system_prompt needs a chat template"):
        load_policy(qwen2_dir, prompts=PromptFormat("none", "Answer briefly."))  # refused when it loads
    with pytest.raises(InputError, match="chat_template must be one of"):
        PromptFormat("always")


def test_every_end_token_of_the_generation_config_ends_a_completion(qwen2_dir):
    policy = load_policy(qwen2_dir)
    tok = policy.tokenizer
    im_end, eot = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(END_OF_TEXT)
    assert set(policy.end_ids) == {im_end, eot} and policy.eos_id == im_end
    # make each end token by turn the only likely next token: a bias on the LM head's output
    head = policy.model.get_output_embeddings()
    prompt = [policy.encode_prompt("What is 1 + 1?")]
    for end in (im_end, eot):
        with torch.no_grad():
            head.weight.zero_()
            head.weight[end] = 0.0
        bias = torch.full((head.weight.shape[0],), -30.0)
        bias[end] = 30.0
        head.bias = torch.nn.Parameter(bias)
        out = generate(
            policy.model,
            prompt,
            SamplingParams(temperature=1.0, max_new_tokens=5),
            eos_id=policy.end_ids,
            pad_id=policy.pad_id,
            row_seeds=[7],
        )
        assert out.completion_ids == [[end]] and out.finish_reasons == ["eos"]
    head.bias = None


def test_sft_on_boxed_gsm8k_demonstrations_ends_with_the_turns_end_token(qwen2_dir):
    task = TaskConfig(name="gsm8k", prompt_style="boxed", heldout_size=4).build()
    problem = task.train[0]
    assert problem.prompt.endswith("put your final answer within \\boxed{}.")
    import random

    demo = task.teacher_completion(problem, random.Random(0))
    answer = problem.reference.rpartition("####")[2].strip()
    assert demo.endswith(f"\\boxed{{{answer}}}.") and "####" not in demo
    from veriloop.verifiers import get

    assert get("gsm8k").verify(demo, problem.reference).score == 1.0


def run_cli(args, cwd, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "veriloop.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def test_veriloop_train_runs_a_saved_tiny_qwen2_with_its_chat_template_on_gsm8k(qwen2_dir, tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "train",
        "--policy",
        qwen2_dir,
        "--task.name",
        "gsm8k",
        "--task.prompt_style",
        "boxed",
        "--task.heldout_size",
        "4",
        "--verifier",
        "gsm8k",
        "--steps",
        "2",
        "--rollout.prompts_per_step",
        "2",
        "--rollout.group_size",
        "2",
        "--sampling.max_new_tokens",
        "16",
        "--run_dir",
        str(run_dir),
        "--device",
        "cpu",
        "--eval_every",
        "2",
        "--eval_problems",
        "2",
        "--threads",
        "1",
    ]
    done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "validation_greedy_accuracy" in rows[-1]
    policy = load_policy(qwen2_dir)
    records = RecordStore(run_dir / "rollouts").read(1)
    assert len(records) == 4
    for r in records:  # the template's ids, exactly; the learner scores these, never re-tokenised text
        assert r.prompt_ids == policy.encode_prompt(r.prompt)
        assert policy.tokenizer.decode(r.prompt_ids).endswith("<|im_start|>assistant\n")
        if r.finish_reason == "eos":
            assert r.finish_token == r.completion_ids[-1] and r.finish_token in policy.end_ids
        else:
            assert r.finish_token is None and len(r.completion_ids) == 16
    final = load_policy(str(run_dir / "final"))
    assert final.tokenizer.chat_template == policy.tokenizer.chat_template
    # the run browser written at the end shows each completion in the model's own byte-level BPE tokens
    from veriloop.report.data import page_data

    data = page_data(run_dir)
    assert data["record_count"] == 8 and (run_dir / "report.html").is_file()
    for view in data["records"]:
        assert "".join(view["pieces"]).startswith(view["completion"]) and view["verifier"].startswith("gsm8k@")
        assert len(view["pieces"]) == view["tokens"] and view["learner"] is None or len(view["learner"]) <= 16


def test_the_tokenizer_is_deterministic():
    a, b = train_bpe_tokenizer(TEXTS), train_bpe_tokenizer(TEXTS)
    assert a.get_vocab() == b.get_vocab()
