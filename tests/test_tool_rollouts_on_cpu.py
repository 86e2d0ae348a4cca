"""Tool-integrated rollouts (``task.reasoning tool``): the sandbox runs each closed code block mid-sampling, the
output goes back into the context, and the per-token model mask keeps the tool's tokens out of every loss."""

import random

import pytest
import torch

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.models.batch import build_policy_batch, last_token_index, select
from veriloop.models.loading import load_policy
from veriloop.rollout.engine import LocalEngine, TaskTeacherEngine, build_requests
from veriloop.rollout.records import Record
from veriloop.rollout.sampler import Generation, SamplingParams
from veriloop.rollout.tools import ToolSettings, closed_block, generate_with_tools, split_segments
from veriloop.tasks.arithmetic import TeacherConfig, tool_trace
from veriloop.tasks.base import BRACES, FENCES
from veriloop.tasks.config import TaskConfig
from veriloop.tasks.expressions import parse_expression
from veriloop.training.config import TrainConfig
from veriloop.training.loop.signals import terminal_rewards
from veriloop.training.trainer import Trainer
from veriloop.verifiers import get
from veriloop.verifiers.tools import run_block, with_display

pytestmark = pytest.mark.timeout(300)
SETTINGS = ToolSettings(BRACES, run_block, max_tool_calls=4, wall_seconds=5.0)
SETTINGS_FENCES = ToolSettings(FENCES, run_block)


# ---------------------------------------------------------------- the format and the sandbox


def test_a_block_closes_only_inside_an_open_block():
    assert closed_block("{a=2+3;a}", BRACES) == "a=2+3;a"
    assert closed_block("{a=2+3;a}[5]{a*4}", BRACES) == "a*4"  # the last block, after an output
    assert closed_block("{a=2+3;a}[5]x}", BRACES) is None  # a brace in text: nothing opened since the output
    assert closed_block("2+3=5}", BRACES) is None
    assert closed_block("text\n```python\nprint(1)\n```", FENCES) == "print(1)"
    assert closed_block("text\n```python\nprint(1)\n`", FENCES) is None  # the fence's first backtick is not a close
    assert split_segments("{a=2+3;a}[5]{a*4}[20]answer=20", BRACES) == [
        ("{a=2+3;a}", True),
        ("[5]", False),
        ("{a*4}", True),
        ("[20]", False),
        ("answer=20", True),
    ]


def test_a_block_shows_its_last_expression_and_keeps_the_earlier_blocks_state():
    assert with_display("a=2+3;a") != "a=2+3;a"
    assert with_display("print(a)") == "print(a)" and with_display("a=///") == "a=///"
    assert run_block([], "a=2+3;a", SETTINGS)[:2] == ("ok", "5")
    assert run_block(["a=2+3;a"], "a*4", SETTINGS)[:2] == ("ok", "20")  # a from the earlier block; its 5 is not shown
    assert run_block([], "print('x');None", SETTINGS)[:2] == ("ok", "x")  # None shows nothing


@pytest.mark.parametrize(
    "code,status",
    [
        ("1/0", "crash"),
        ("a=///", "crash"),
        ("undefined_name", "crash"),
        ("while True: pass", "timeout"),
        pytest.param("import os;os.system('ls')", "violation", marks=pytest.mark.sandbox_layer("audit-hook")),
        ("print('x'*100000)", "output_limit"),
    ],
)
def test_a_failing_block_is_shown_as_its_failure(code, status):
    got, shown, seconds = run_block([], code, ToolSettings(BRACES, run_block, wall_seconds=2.0))
    assert got == status and shown.startswith(status + ":") and seconds > 0


def test_the_teachers_tool_traces_show_what_the_sandbox_prints():
    perfect, slips = TeacherConfig.perfect(), TeacherConfig(subtraction_slip=1.0)
    assert tool_trace(parse_expression("(2+3)*4"), perfect, random.Random(0)) == "{a=2+3;a}[5]{a*4}[20]answer=20"
    assert tool_trace(parse_expression("(17-9)*3"), slips, random.Random(0)) == "{a=9-17;a}[-8]{abs(a)*3}[24]answer=24"
    # the multiplication slip cannot happen: the interpreter multiplies
    mul = TeacherConfig(multiplication_slip=1.0, subtraction_slip=0.0)
    assert tool_trace(parse_expression("(2+3)*4"), mul, random.Random(0)) == "{a=2+3;a}[5]{a*4}[20]answer=20"
    task = TaskConfig(reasoning="tool").build()
    outcome, process = get("arithmetic-tool"), get("arithmetic-tool-process")
    rng, wrong_steps = random.Random(0), 0
    slipped = "{a=9-17;a}[-8]{abs(a)*3}[24]answer=24"
    assert (outcome.verify(slipped, "(17-9)*3").score, process.verify(slipped, "(17-9)*3").score) == (1.0, 0.0)
    for p in task.heldout()[:30]:
        assert p.prompt == p.reference + "?run:"
        text = task.teacher_completion(p, rng)
        segments = split_segments(text, BRACES)
        earlier = []
        for (code, _), (shown, by_model) in zip(segments[0::2], segments[1::2]):
            status, out, _ = run_block(earlier, code[1:-1], SETTINGS)
            assert (status, "[" + out + "]", by_model) == ("ok", shown, False), text
            earlier.append(code[1:-1])
        assert outcome.verify(text, p.reference).score == 1.0, text
        wrong_steps += process.verify(text, p.reference).score == 0.0
    assert wrong_steps > 0  # the subtraction slip (0.6 by default) shows as right answer, wrong steps


def test_tool_verifiers_and_formats_are_refused_where_they_would_score_nothing():
    base = {"task.reasoning": "tool"}
    with pytest.raises(
        ConfigError,
        match="task.reasoning tool: verifier 'arithmetic' reads a text trace.*use verifier 'arithmetic-tool'",
    ):
        build_config(TrainConfig, {}, {**base, "verifier": "arithmetic"})
    with pytest.raises(
        ConfigError, match="verifier 'arithmetic-tool' reads a tool-integrated trace: set task.reasoning tool"
    ):
        build_config(TrainConfig, {}, {"verifier": "arithmetic-tool"})
    with pytest.raises(ConfigError, match="vllm engine does not run tool calls"):
        build_config(TrainConfig, {}, {**base, "verifier": "arithmetic-tool", "rollout.engine": "vllm"})
    with pytest.raises(ConfigError, match="rollout.max_tool_calls=2 is not read by the reasoning format 'cot'"):
        build_config(TrainConfig, {}, {"rollout.max_tool_calls": 2})
    with pytest.raises(
        ConfigError, match="advantage.estimator process with task.reasoning tool: the PRM scores text steps"
    ):
        build_config(
            TrainConfig, {}, {**base, "verifier": "arithmetic-tool", "algo": "grpo_process", "process.prm": "x"}
        )
    from veriloop.search.run import SearchConfig

    with pytest.raises(InputError, match="veriloop search samples without running tools"):
        build_config(SearchConfig, {}, {"task.reasoning": "tool"})
    with pytest.raises(InputError, match="nothing to imitate"):
        gsm8k = TaskConfig(name="gsm8k", reasoning="tool").build()
        gsm8k.teacher_completion(gsm8k.heldout()[0], random.Random(0))


def test_gsm8k_asks_for_fenced_blocks_on_the_same_split():
    plain, tool = TaskConfig(name="gsm8k").build(), TaskConfig(name="gsm8k", reasoning="tool").build()
    assert [p.id for p in tool.validation()[:20]] == [p.id for p in plain.validation()[:20]]
    assert "```python" in tool.heldout()[0].prompt and tool.tool_format is FENCES
    q = tool.heldout()[0]
    answer = q.reference.rsplit("####", 1)[1].strip()
    text = f"Compute it.\n```python\nprint({answer})\n```\n```output\n{answer}\n```\n#### {answer}"
    assert get(tool.default_verifier).verify(text, q.reference).score == 1.0


# ---------------------------------------------------------------- the sampling loop, with a scripted model


class ScriptedPolicy:
    """The built-in tokenizer and a model that writes a fixed script: segment k after k output blocks (the
    sampler's contract: stop at a stop id, keep it; end with EOS after the last segment).  The tool loop, the
    sandbox and the records are real; only the model's choices are scripted, so each case is known."""

    def __init__(self, segments: list[str], fmt=BRACES, prompt_end: str = "?run:"):
        self.tokenizer = load_policy("builtin:base").tokenizer
        self.segments, self.fmt, self.prompt_end = segments, fmt, prompt_end
        self.eos_id = self.tokenizer.eos_token_id
        self.calls = []

    def sample(self, prompt_ids, params, *, n, stop_ids=(), row_seeds=None, generator=None):
        rows = [p for p in prompt_ids for _ in range(n)]
        self.calls.append(len(rows))
        out, lps, fin = [], [], []
        for ids in rows:
            text = self.tokenizer.decode(ids)
            k = text.count(self.fmt.output_open)
            after = text.rfind(self.fmt.output_close) + len(self.fmt.output_close)
            written = text[after:] if k else text.split(self.prompt_end, 1)[1]
            seg = self.tokenizer(self.segments[min(k, len(self.segments) - 1)], add_special_tokens=False).input_ids
            seg = seg[len(self.tokenizer(written, add_special_tokens=False).input_ids) :] if written else seg
            new, why = [], "eos"
            for t in seg:
                new.append(t)
                if t in stop_ids:
                    why = "stop"
                    break
            if why == "eos":
                new.append(self.eos_id)
            if len(new) > params.max_new_tokens:
                new, why = new[: params.max_new_tokens], "length"
            out.append(new)
            lps.append([-0.5] * len(new))
            fin.append(why)
        return Generation(out, lps, fin)


def tool_rows(segments, max_new_tokens=64, **settings):
    policy = ScriptedPolicy(segments)
    prompt = policy.tokenizer("(2+3)*4?run:", add_special_tokens=False).input_ids
    gen = generate_with_tools(
        policy,
        [prompt],
        SamplingParams(max_new_tokens=max_new_tokens),
        ToolSettings(BRACES, run_block, **settings),
        row_seeds=[7],
        n=1,
    )
    text = policy.tokenizer.decode(gen.completion_ids[0])
    return gen, text, policy


def test_generation_pauses_runs_the_block_and_goes_on():
    gen, text, _ = tool_rows(["{a=2+3;a}", "{a*4}", "answer=20"])
    assert text == "{a=2+3;a}[5]{a*4}[20]answer=20<eos>" and gen.finish_reasons == ["eos"]
    mask, lps, ids = gen.model_masks[0], gen.logprobs[0], gen.completion_ids[0]
    tool_tokens = [i for i, m in enumerate(mask) if m == 0]
    assert "".join(text[i] for i in tool_tokens) == "[5][20]"  # exactly the output blocks are the tool's
    assert all(lps[i] == 0.0 for i in tool_tokens) and all(lp == -0.5 for lp, m in zip(lps, mask) if m)
    calls = gen.tool_calls[0]
    assert [(c.code, c.output, c.status) for c in calls] == [("a=2+3;a", "5", "ok"), ("a*4", "20", "ok")]
    assert [ids[c.start] for c in calls] == [ids[9], ids[17]] and all(mask[c.start] == 0 for c in calls)
    assert get("arithmetic-tool-process").verify(text.replace("<eos>", ""), "(2+3)*4").score == 1.0


def test_a_tool_failure_is_recorded_and_the_model_goes_on():
    gen, text, _ = tool_rows(["{a=2+3;a/0}", "{a*4}", "answer=20"], max_new_tokens=200)
    calls = gen.tool_calls[0]
    # a block that failed is not run again for the state of later ones (unlike a notebook, where a=2+3 would stay)
    assert [c.status for c in calls] == ["crash", "crash"] and "NameError" in calls[1].output
    assert text.startswith("{a=2+3;a/0}[crash: ZeroDivisionError: division by zero]{a*4}[crash: NameError")
    assert text.endswith("answer=20<eos>") and gen.finish_reasons == ["eos"]


def test_the_call_limit_leaves_later_blocks_as_text():
    gen, text, _ = tool_rows(["{a=2+3;a}", "{a*4}answer=20"], max_tool_calls=1)
    assert text == "{a=2+3;a}[5]{a*4}answer=20<eos>" and len(gen.tool_calls[0]) == 1
    gen, text, _ = tool_rows(["{a=2+3;a}answer=5"], max_tool_calls=0)
    assert text == "{a=2+3;a}answer=5<eos>" and gen.tool_calls[0] == [] and all(gen.model_masks[0])


def test_the_token_budget_counts_tool_output_and_can_end_inside_it():
    gen, text, _ = tool_rows(["{a=2+3;a}", "{a*4}", "answer=20"], max_new_tokens=11)
    assert text == "{a=2+3;a}[5" and gen.finish_reasons == ["length"]
    assert gen.model_masks[0][-2:] == [0, 0] and gen.tool_calls[0][0].tokens == 2


def test_fenced_blocks_pause_on_their_last_backtick():
    """GSM8K's format with the built-in character tokenizer: each backtick may end a fence, so sampling pauses on
    it, and only the one that closes an open ```python block runs it."""
    policy = ScriptedPolicy(["Six sevens.\n```python\nx=6*7\nx\n```", "\n#### 42"], FENCES, "block.\n")
    prompt = policy.tokenizer(
        "Q?" + TaskConfig(name="gsm8k", reasoning="tool").build().heldout()[0].prompt[-80:], add_special_tokens=False
    ).input_ids
    gen = generate_with_tools(policy, [prompt], SamplingParams(max_new_tokens=120), SETTINGS_FENCES, row_seeds=[1], n=1)
    text = policy.tokenizer.decode(gen.completion_ids[0])
    assert text == "Six sevens.\n```python\nx=6*7\nx\n```\n```output\n42\n```\n\n#### 42<eos>"
    assert [(c.code, c.output) for c in gen.tool_calls[0]] == [("x=6*7\nx", "42")]
    assert len(policy.calls) > 3  # it paused at the opening fence's backticks too, and went on without a call
    assert get("gsm8k").verify(text.removesuffix("<eos>"), "6*7\n#### 42").score == 1.0


def test_gsm8k_trains_with_tools_and_with_a_thinking_budget(tmp_path):
    base = {
        "policy": "builtin:init",
        "model.max_positions": 1280,
        "task.name": "gsm8k",
        "verifier": "gsm8k",
        "steps": 1,
        "rollout.prompts_per_step": 2,
        "rollout.group_size": 2,
        "sampling.max_new_tokens": 24,
        "kl.beta": 0.0,
    }  # (a context that holds GSM8K's prompts)
    from veriloop.rollout.records import RecordStore

    Trainer(
        build_config(TrainConfig, {}, {**base, "task.reasoning": "tool", "run_dir": str(tmp_path / "t")}),
        progress=False,
    ).train()
    records = RecordStore(tmp_path / "t" / "rollouts").read(1)
    assert all(
        r.tool_calls is not None and r.model_mask is not None and r.sampling["tool_format"] == "fences" for r in records
    )
    Trainer(
        build_config(TrainConfig, {}, {**base, "sampling.max_thinking_tokens": 8, "run_dir": str(tmp_path / "b")}),
        progress=False,
    ).train()
    records = RecordStore(tmp_path / "b" / "rollouts").read(1)
    forced = [r for r in records if not all(r.model_mask)]
    assert forced and all("\n#### " in r.completion for r in forced)  # the random model never ends its thinking


# ---------------------------------------------------------------- records, batches and the loss


def tool_record(text: str, reward: float, tok, group: str = "1-0-0") -> Record:
    ids, mask = [], []
    for segment, by_model in split_segments(text, BRACES):
        part = tok(segment, add_special_tokens=False).input_ids
        ids, mask = ids + part, mask + [int(by_model)] * len(part)
    ids, mask = ids + [tok.eos_token_id], mask + [1]
    prompt = tok("(2+3)*4?run:", add_special_tokens=False).input_ids
    return Record(
        "p",
        group,
        "(2+3)*4?run:",
        "(2+3)*4",
        prompt,
        ids,
        text,
        [-1.0 * m for m in mask],
        {"temperature": 1.0},
        0,
        "eos",
        reward=reward,
        reward_components={"outcome": reward},
        model_mask=mask,
        tool_calls=[],
    )


def test_holes_in_the_mask_keep_the_last_token_and_the_width():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.float32)
    assert last_token_index(mask).tolist() == [4, 0, 5]
    assert terminal_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)[0].tolist() == [0, 0, 0, 0, 2.0, 0]
    batch = build_policy_batch([[1, 2]] * 2, [[5, 6, 7, 8, 9], [5, 6, 7]], 0, [[1, 0, 0, 1, 0], [1, 1, 0]])
    assert select(batch, torch.tensor([0])).completion_ids.shape[1] == 4  # up to its last model token
    with pytest.raises(ValueError, match="model mask of 2 entries"):
        build_policy_batch([[1]], [[5, 6, 7]], 0, [[1, 0]])
    with pytest.raises(ValueError, match="model_mask must hold one 0/1"):
        tool_record("{a}[5]answer=5", 1.0, load_policy("builtin:base").tokenizer).__class__(
            "p", "g", "x", "y", [1], [5, 6], "t", None, {}, 0, "eos", model_mask=[1]
        )


def test_gae_over_a_row_with_holes_equals_gae_over_its_model_tokens():
    from veriloop.algorithms.advantages import gae_advantages
    from veriloop.training.loop.estimators import EstimatorInput, _gae

    cfg = build_config(TrainConfig, {}, {"algo": "ppo"})
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0]], dtype=torch.float64)
    rewards = torch.tensor([[0.1, 0.0, 9.0, 9.0, 0.0, 1.0, 9.0]], dtype=torch.float64)
    values = torch.tensor([[0.3, 0.2, 5.0, 5.0, 0.4, 0.6, 5.0]], dtype=torch.float64)
    got = _gae(EstimatorInput(torch.zeros(1, 1), mask, rewards, values, None, None), cfg)
    keep = mask[0].bool()
    want, _ = gae_advantages(rewards[:, keep], values[:, keep], mask[:, keep], cfg.advantage.gamma, cfg.advantage.lam)
    assert torch.allclose(got[:, keep], want) and (got[:, ~keep] == 0).all()


@pytest.mark.parametrize("masked", [True, False])
def test_no_tool_token_reaches_the_loss_or_the_kl(tmp_path, masked):
    """The learner's gradient with respect to the logits that predict each tool token is exactly 0 (policy loss,
    KL in the loss and entropy bonus together); without the mask (the control) it is not."""
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path),
            "policy": "builtin:base",
            "task.reasoning": "tool",
            "verifier": "arithmetic-tool",
            "rollout.prompts_per_step": 1,
            "rollout.group_size": 2,
            "kl.beta": 0.1,
            "loss.entropy_coef": 0.01,
        },
    )
    trainer = Trainer(cfg, progress=False)
    tok = trainer.policy.tokenizer
    records = [
        tool_record("{a=2+3;a}[5]{a*4}[20]answer=20", 1.0, tok),
        tool_record("{a=2+3;a}[5]{a*5}[25]answer=25", 0.0, tok),
    ]
    if not masked:
        for r in records:
            r.model_mask = None
    signal = trainer.learning_signal(records)
    seen = []
    real = trainer.policy.completion_logits

    def spy(batch):
        logits = real(batch)
        logits.retain_grad()
        seen.append((logits, batch))
        return logits

    trainer.policy.completion_logits = spy
    trainer.learner.update(signal.batch, trainer.kl_control.beta, torch.Generator().manual_seed(0))
    logits, batch = next((lg, b) for lg, b in seen if lg.grad is not None)
    per_token = logits.grad.abs().sum(dim=-1)  # [N, T]
    tool = torch.tensor(
        [[m == 0 for m in r.model_mask or tool_record(r.completion, 0, tok).model_mask] for r in records]
    )
    assert (per_token[~tool] > 0).any()
    if masked:
        assert (per_token[tool] == 0).all(), "a tool token reached the loss"
    else:
        assert (per_token[tool] > 0).all()  # the control: the same tokens, unmasked, do get a gradient


# ---------------------------------------------------------------- engines and the command line


def test_demonstrations_in_the_tool_format_carry_the_mask():
    task = TaskConfig(reasoning="tool").build()
    policy = load_policy("builtin:base")
    [request] = build_requests(0, 1, 0, task.train_batch(2, random.Random(0)), 2, SamplingParams(), -1, "task-teacher")
    for r in TaskTeacherEngine(task, policy).generate(request):
        shown = "".join(ch for ch, m in zip(r.completion + "\0", r.model_mask) if m == 0)
        assert shown == "".join(s for s, by_model in split_segments(r.completion, BRACES) if not by_model)


def test_the_local_engine_records_every_call():
    """A random-weights policy writes braces now and then: its rows pause, run and go on, and the record keeps
    each call where its tokens are."""
    policy = load_policy("builtin:init", seed=2)
    task = TaskConfig(reasoning="tool").build()
    requests = build_requests(
        0,
        1,
        0,
        task.train_batch(8, random.Random(1)),
        4,
        SamplingParams(max_new_tokens=64),
        0,
        "policy",
        tools=SETTINGS,
    )
    records = LocalEngine(policy).run(requests)[0]
    assert all(r.model_mask is not None and r.tool_calls is not None for r in records)
    calls = [(r, c) for r in records for c in r.tool_calls]
    assert calls, "no row closed a block: pick another seed"
    for r, c in calls:
        assert r.model_mask[c["start"] : c["start"] + c["tokens"]] == [0] * c["tokens"]
        assert r.behavior_logprobs[c["start"] : c["start"] + c["tokens"]] == [0.0] * c["tokens"]
    assert all(r.sampling["max_tool_calls"] == 4 for r in records)
