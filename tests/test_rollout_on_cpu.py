"""The sampler: greedy equals transformers' generate, behaviour log-probs are the learner's, records."""

import math

import pytest
import torch

from veriloop.algorithms import sampling_logprobs
from veriloop.models.batch import build_policy_batch, completion_logits
from veriloop.models.tiny import TinyModelConfig, build_char_tokenizer, build_tiny_model
from veriloop.rollout.records import Record, RecordStore, check_reward
from veriloop.rollout.sampler import SamplingParams, generate
from veriloop.training.loop.logprobs import token_logprobs

TOK = build_char_tokenizer()
MODEL = build_tiny_model(TOK, TinyModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2), seed=3)
PROMPTS = [TOK(p).input_ids for p in ["(2+3)*4?", "17*23?", "24/(3+5)?", "1?"]]


def run(params, n=1, seed=0, prompts=PROMPTS):
    g = torch.Generator().manual_seed(seed)
    return generate(MODEL, prompts, params, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, generator=g, n=n)


def test_greedy_matches_transformers_generate():
    ours = run(SamplingParams(temperature=0, max_new_tokens=12))
    for p, c in zip(PROMPTS, ours.completion_ids):
        ids = torch.tensor([p])
        ref = MODEL.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=12,
            pad_token_id=TOK.pad_token_id,
            eos_token_id=TOK.eos_token_id,
        )
        assert ref[0, len(p) :].tolist()[: len(c)] == c
    assert all(lp == 0.0 for row in ours.logprobs for lp in row)  # a point mass


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=10),
        SamplingParams(temperature=0.7, top_k=5, max_new_tokens=10),
        SamplingParams(temperature=2.0, top_p=0.8, max_new_tokens=10),
    ],
)
def test_behaviour_logprobs_are_the_learners_under_the_same_transforms(params):
    out = run(params, n=3)
    prompts = [p for p in PROMPTS for _ in range(3)]
    batch = build_policy_batch(prompts, out.completion_ids, TOK.pad_token_id)
    with torch.no_grad():
        lp = sampling_logprobs(completion_logits(MODEL, batch), params.temperature, params.top_k, params.top_p)
    token_lp = lp.gather(-1, batch.completion_ids[..., None]).squeeze(-1)
    for i, row in enumerate(out.logprobs):
        assert all(math.isfinite(x) for x in row)  # never a token outside the behaviour support
        assert torch.allclose(token_lp[i, : len(row)], torch.tensor(row), atol=2e-5)


def test_min_new_tokens_holds_off_the_end_and_the_learner_reads_the_same_distribution():
    """Fixed work: no end token before min_new_tokens; the recorded log-probs are those of the distribution without
    the end tokens there (what transformers' min_new_tokens samples from), and the learner's sampling distribution
    (``token_logprobs`` with the end ids) computes the same numbers; the model's own distribution stays whole."""
    free = run(SamplingParams(temperature=1.0, top_k=8, max_new_tokens=10), n=8)
    assert min(len(c) for c in free.completion_ids) < 6  # without the option, some rows end early
    params = SamplingParams(temperature=1.0, top_k=8, max_new_tokens=10, min_new_tokens=6)
    out = run(params, n=8)
    eos = TOK.eos_token_id
    assert all(len(c) >= 6 and eos not in c[:6] for c in out.completion_ids)
    batch = build_policy_batch([p for p in PROMPTS for _ in range(8)], out.completion_ids, TOK.pad_token_id)
    with torch.no_grad():
        logits = completion_logits(MODEL, batch)
        learner, _ = token_logprobs(logits, batch.completion_ids, params, "sampling", end_ids=(eos,))
        whole, _ = token_logprobs(logits, batch.completion_ids, params, "model", end_ids=(eos,))
        unmasked = sampling_logprobs(logits, 1.0, 8, 1.0).gather(-1, batch.completion_ids[..., None]).squeeze(-1)
    for i, row in enumerate(out.logprobs):
        assert torch.allclose(learner[i, : len(row)], torch.tensor(row), atol=2e-5)
    # before position 6 the end token's mass went to the others: each kept token is at least as likely
    assert torch.all(learner[:, :6] >= unmasked[:, :6] - 1e-6) and torch.any(learner[:, :6] > unmasked[:, :6] + 1e-4)
    later = batch.completion_mask[:, 6:].bool()  # from position 6 on, the distributions are the same
    assert later.any() and torch.allclose(learner[:, 6:][later], unmasked[:, 6:][later])
    assert not torch.allclose(whole[:, :6], learner[:, :6])  # "model" (SFT, DPO) is never masked
    with pytest.raises(ValueError, match="min_new_tokens must be in"):
        SamplingParams(max_new_tokens=4, min_new_tokens=5)


def test_group_layout_and_determinism():
    a = run(SamplingParams(temperature=1.0, max_new_tokens=8), n=4, seed=1)
    b = run(SamplingParams(temperature=1.0, max_new_tokens=8), n=4, seed=1)
    c = run(SamplingParams(temperature=1.0, max_new_tokens=8), n=4, seed=2)
    assert a.completion_ids == b.completion_ids and a.logprobs == b.logprobs
    assert a.completion_ids != c.completion_ids
    assert len(a.completion_ids) == 4 * len(PROMPTS)
    greedy = run(SamplingParams(temperature=0, max_new_tokens=8), n=3)
    for i in range(len(PROMPTS)):  # rows i*n .. i*n+n-1 belong to prompt i
        assert greedy.completion_ids[3 * i] == greedy.completion_ids[3 * i + 1] == greedy.completion_ids[3 * i + 2]


def test_padding_does_not_change_results():
    batch = run(SamplingParams(temperature=0, max_new_tokens=10))
    alone = [run(SamplingParams(temperature=0, max_new_tokens=10), prompts=[p]).completion_ids[0] for p in PROMPTS]
    assert batch.completion_ids == alone


def test_first_token_frequencies_follow_the_recorded_distribution():
    # 4000 draws of the first token of one prompt: empirical frequencies vs recorded probabilities.
    params = SamplingParams(temperature=1.0, top_k=4, max_new_tokens=1)
    out = run(params, n=4000, prompts=[PROMPTS[0]])
    counts: dict[int, int] = {}
    probs: dict[int, float] = {}
    for ids, lps in zip(out.completion_ids, out.logprobs):
        counts[ids[0]] = counts.get(ids[0], 0) + 1
        probs[ids[0]] = math.exp(lps[0])
    assert len(counts) <= 4
    for tok, c in counts.items():
        p = probs[tok]
        assert abs(c / 4000 - p) < 4 * math.sqrt(p * (1 - p) / 4000) + 1e-3


def test_length_limit_and_finish_reasons():
    out = run(SamplingParams(temperature=1.0, max_new_tokens=5), n=2)
    for ids, reason in zip(out.completion_ids, out.finish_reasons):
        assert len(ids) <= 5
        assert reason == ("eos" if ids[-1] == TOK.eos_token_id else "length")
        assert reason == "eos" or len(ids) == 5


@pytest.mark.parametrize("engine", ["static", "hf"])
def test_stop_tokens_end_rows_and_stay_in_the_completion(engine):
    """A step-at-a-time search stops each row at a separator (finish reason "stop", token kept)."""
    stop = TOK.convert_tokens_to_ids("1")  # a token the tiny random model emits often
    params = SamplingParams(temperature=1.0, max_new_tokens=20)

    def cut(seed):
        g = torch.Generator().manual_seed(seed)
        return generate(
            MODEL,
            PROMPTS,
            params,
            eos_id=TOK.eos_token_id,
            pad_id=TOK.pad_token_id,
            generator=g,
            n=4,
            engine=engine,
            stop_ids=(stop,),
        )

    out = cut(5)
    assert "stop" in out.finish_reasons
    for ids, lps, reason in zip(out.completion_ids, out.logprobs, out.finish_reasons):
        assert len(lps) == len(ids) and stop not in ids[:-1]
        if reason == "stop":
            assert ids[-1] == stop
        elif reason == "eos":
            assert ids[-1] == TOK.eos_token_id
        else:
            assert len(ids) == 20 and ids[-1] != stop
    again = cut(5)
    assert again.completion_ids == out.completion_ids and again.finish_reasons == out.finish_reasons


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="Generator"):
        generate(MODEL, PROMPTS, SamplingParams(temperature=1.0), eos_id=2, pad_id=0)
    with pytest.raises(ValueError, match="non-empty"):
        run(SamplingParams(temperature=0), prompts=[[]])
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


def make_record(**kw):
    base = dict(
        problem_id="p",
        group_id="1-0",
        prompt="1?",
        reference="1",
        prompt_ids=[1, 5],
        completion_ids=[7, 2],
        completion="x",
        behavior_logprobs=[-0.1, -0.2],
        sampling={"temperature": 1.0},
        policy_version=0,
        finish_reason="eos",
        reward=1.0,
    )
    base.update(kw)
    return Record(**base)


def test_record_store_round_trip(tmp_path):
    store = RecordStore(tmp_path)
    records = [make_record(), make_record(problem_id="q", finish_reason="length")]
    store.write(3, records)
    assert store.read(3) == records and store.steps() == [3]
    store.write(5, records)
    store.remove_after(3)
    assert store.steps() == [3]


def test_record_to_json_is_asdict_and_independent_of_the_record():
    import dataclasses

    record = make_record(reward_components={"correct": 1.0}, sampling={"temperature": 1.0, "stop_ids": [5, 6]})
    row = record.to_json()
    assert row == dataclasses.asdict(record)
    row["completion_ids"].append(99)
    row["sampling"]["stop_ids"].append(7)
    row["reward_components"]["correct"] = 0.0
    assert record == make_record(reward_components={"correct": 1.0}, sampling={"temperature": 1.0, "stop_ids": [5, 6]})


def test_record_validation():
    with pytest.raises(ValueError, match="behaviour log-probs"):
        make_record(behavior_logprobs=[-0.1])
    with pytest.raises(ValueError, match="finish_reason"):
        make_record(finish_reason="timeout")
    for bad in (float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="non-finite reward"):
            check_reward(make_record(reward=bad))


def test_completion_text_keeps_special_tokens_visible():
    from veriloop.rollout.sampler import completion_text

    ids = (
        TOK("answer=2", add_special_tokens=False).input_ids
        + [TOK.unk_token_id]
        + TOK("0", add_special_tokens=False).input_ids
    )
    assert completion_text(TOK, ids + [TOK.eos_token_id], "eos") == "answer=2<unk>0"  # not "answer=20"
    assert completion_text(TOK, ids, "length") == "answer=2<unk>0"
