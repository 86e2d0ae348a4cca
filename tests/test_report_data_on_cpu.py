"""What the run browser reads, without a browser: the rollout index, the served filters, the spot-check sample,
the token values' rows, marks, and the comparison's config difference (tests/test_report_in_browser_on_cpu.py
drives the pages themselves)."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request

import pytest
import torch

from veriloop.errors import InputError
from veriloop.report.compare import compare_data
from veriloop.report.data import curves, page_data, spot_check
from veriloop.report.report import import_marks
from veriloop.report.serve import record_query, start_server
from veriloop.rollout.index import RolloutIndex
from veriloop.rollout.records import Record, RecordStore
from veriloop.training.loop.token_values import record_key, token_value_rows


def record(step: int, i: int, reward: float, words: str = "1+1=2;answer=2", finish="eos", tools=None) -> Record:
    ids = list(range(3, 3 + len(words)))
    return Record(
        problem_id=f"p-{i % 3}",
        group_id=f"{step}-0-{i // 2}",
        prompt="1+1?",
        reference="2",
        prompt_ids=[1],
        completion_ids=ids,
        completion=words,
        behavior_logprobs=[-0.5] * len(ids),
        sampling={"seed": 1000 * step + i},
        policy_version=step,
        finish_reason=finish,
        reward=reward,
        verdict_outcome="correct" if reward > 0 else "wrong",
        verifier="arithmetic@1",
        tool_calls=tools,
    )


def write_run(run_dir, steps: int = 8, per_step: int = 4) -> RecordStore:
    (run_dir / "rollouts").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("algo: grpo\npolicy: builtin:base\noptim:\n  lr: 0.001\n")
    rows = [
        {"step": s, "reward_mean": s / steps, "kl": 0.01, **({"validation_greedy_accuracy": 0.5} if s % 4 == 0 else {})}
        for s in range(1, steps + 1)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9, "rew')
    store = RecordStore(run_dir / "rollouts", index=True)
    for s in range(1, steps + 1):
        store.write(
            s,
            [
                record(
                    s, i, float(i % 2), "answer=2" if i == 3 else "1+1=2;answer=2", finish="length" if i == 2 else "eos"
                )
                for i in range(per_step)
            ],
        )
    return store


def test_the_index_follows_the_store_and_is_rebuilt_when_lost(tmp_path):
    store = write_run(tmp_path)
    index = RolloutIndex(tmp_path / "rollouts")
    db = index.connect()
    assert db.execute("SELECT COUNT(*), COUNT(DISTINCT step) FROM records").fetchone() == (32, 8)
    row = db.execute("SELECT reward, outcome, finish_reason, reasoning_chars FROM records WHERE step = 2 AND i = 3")
    assert row.fetchone() == (1.0, "correct", "eos", 0)
    db.close()
    store.remove_after(5)  # a resume from step 5 forgets later steps, in the index too
    db = index.connect()
    assert db.execute("SELECT MAX(step) FROM records").fetchone() == (5,)
    db.close()
    index.path.write_bytes(b"not a database")  # damaged: rebuilt from the step files
    assert index.catch_up(RecordStore(tmp_path / "rollouts")) == 5
    db = index.connect()
    assert db.execute("SELECT COUNT(*) FROM records").fetchone() == (20,)
    db.close()


def test_the_served_filters_are_sql_of_the_index_and_bad_ones_are_refused(tmp_path):
    write_run(tmp_path)
    db = sqlite3.connect(tmp_path / "rollouts" / "index.sqlite")
    count = lambda q: db.execute("SELECT COUNT(*) FROM records" + record_query(q)[0], record_query(q)[1]).fetchone()[0]
    assert count({}) == 32
    assert count({"step": "3-4"}) == 8
    assert count({"step": "3-4", "reward_min": "0.5"}) == 4
    assert count({"truncated": "yes"}) == 8 and count({"truncated": "no"}) == 24
    assert count({"problem": "p-1"}) == 8 and count({"outcome": "wrong", "group": "1-0-0"}) == 1
    for bad, said in [
        ({"step": "x"}, "step filter must be N or A-B"),
        ({"reward_min": "high"}, "reward_min must"),
        ({"tools": "maybe"}, "tools must be one of"),
        ({"colour": "red"}, "unknown filter 'colour'"),
    ]:
        with pytest.raises(InputError, match=said):
            record_query(bad)


def test_the_spot_check_sample_is_fixed_and_flags_the_extremes(tmp_path):
    write_run(tmp_path)
    db = RolloutIndex(tmp_path / "rollouts").connect()
    first, again = spot_check(db), spot_check(db)
    assert first == again and first  # a fixed seed: the same sample every time
    assert {it["range"] for it in first} == {"1-2", "3-4", "5-6", "7-8"}
    rewarded = {(s, i) for s in range(1, 9) for i in (1, 3)}
    assert all((it["step"], it["i"]) in rewarded for it in first)
    flagged = [it for it in first if it["i"] == 3]
    assert flagged and all("answer-only" in it["flags"] and "shortest" in it["flags"] for it in flagged)


def test_curves_leave_gaps_unfilled_and_a_half_written_last_line_out(tmp_path):
    write_run(tmp_path)
    data = page_data(tmp_path)
    c = data["curves"]
    assert c["steps"] == list(range(1, 9))  # the cut ninth line of a run still going is left out
    assert c["series"]["validation_greedy_accuracy"] == [None, None, None, 0.5, None, None, None, 0.5]
    assert c["eval_steps"] == [4, 8]
    assert {p["id"] for p in c["panels"]} >= {"reward", "evaluation", "kl_entropy"}
    assert "kl" not in curves([{"step": 1, "kl": float("nan")}])["series"]  # a NaN is no value to draw
    assert data["record_count"] == 32 and len(data["records"]) == 32


def test_token_value_rows_key_records_by_group_and_seed():
    records = [record(1, i, float(i)) for i in range(2)]
    mask = torch.ones(2, 3)
    advantages = torch.tensor([[-1.0, -1.0, -1.0], [0.5, 1.0, 1.5]])
    rows = token_value_rows(
        records, advantages, mask, [records[1]], {"ratio": {0: [1.0, 1.1, 0.9]}}, {id(records[1]): [[2, 0.75]]}
    )
    assert rows[0] == {"key": record_key(records[0]), "problem_id": "p-0", "advantage": -1.0}  # one value: GRPO's
    assert rows[1]["advantage"] == [0.5, 1.0, 1.5] and rows[1]["ratio"] == [1.0, 1.1, 0.9]
    assert rows[1]["prm_steps"] == [[2, 0.75]] and record_key(records[1]) == "1-0-0#1001"


def test_update_stats_keep_token_values_only_when_asked():
    from veriloop.training.loop.learner import UpdateStats

    rows, values, mask = torch.tensor([0, 1]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1, 1], [1, 0]])
    kept, dropped = UpdateStats(keep_tokens=True), UpdateStats(keep_tokens=False)
    for stats in (kept, dropped):
        stats.token_values("ratio", rows, values, mask)
    assert kept.tokens["ratio"] == {0: [1.0, 2.0], 1: [3.0]} and dropped.tokens == {}  # save_rollouts off: none kept


def test_marks_are_merged_and_bad_files_named(tmp_path):
    write_run(tmp_path)
    good = tmp_path / "marks.json"
    good.write_text(json.dumps({"marks": {"2:1": {"mark": "suspicious", "note": "no steps"}}}))
    assert import_marks(tmp_path, good) == {"2:1": {"mark": "suspicious", "note": "no steps"}}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"marks": {"2:1": {"mark": "maybe"}}}))
    with pytest.raises(InputError, match="mark of record '2:1' must be"):
        import_marks(tmp_path, bad)
    with pytest.raises(InputError, match="does not exist"):
        import_marks(tmp_path, tmp_path / "none.json")


def test_compare_lists_only_the_options_that_differ(tmp_path):
    write_run(tmp_path / "a")
    write_run(tmp_path / "b")
    (tmp_path / "b" / "config.yaml").write_text("algo: grpo\npolicy: builtin:base\noptim:\n  lr: 0.0003\nseed: 3\n")
    data = compare_data([tmp_path / "a", tmp_path / "b"])
    assert data["config_diff"] == [["optim.lr", 0.001, 0.0003], ["seed", "(not set)", 3]]
    with pytest.raises(InputError, match="at least two"):
        compare_data([tmp_path / "a"])
    with pytest.raises(InputError, match="not a training run directory"):
        compare_data([tmp_path / "a", tmp_path / "nothing"])


@pytest.mark.timeout(60)
def test_the_server_answers_on_loopback_and_refuses_bad_input(tmp_path):
    write_run(tmp_path)
    httpd, run = start_server(tmp_path)
    try:
        host, port = httpd.server_address
        assert host == "127.0.0.1"
        url = f"http://127.0.0.1:{port}"
        got = json.loads(urllib.request.urlopen(f"{url}/api/records?step=2&limit=2").read())
        assert got["total"] == 4 and [r["id"] for r in got["rows"]] == ["2:0", "2:1"]
        one = json.loads(urllib.request.urlopen(f"{url}/api/record?id=2:1").read())
        assert one["completion"] == "1+1=2;answer=2" and one["behavior"] == [-0.5] * 14
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{url}/api/record?id=99:0")
        assert e.value.code == 400 and b"no record '99:0'" in e.value.read()
        post = urllib.request.Request(
            f"{url}/api/marks",
            json.dumps({"id": "2:1", "mark": {"mark": "fine"}}).encode(),
            {"Content-Type": "application/json"},
        )
        urllib.request.urlopen(post)
        assert json.loads((tmp_path / "spot_check.json").read_text())["marks"]["2:1"]["mark"] == "fine"
    finally:
        httpd.shutdown()


@pytest.mark.parametrize(
    "text, chars",
    [
        ("answer=2", 0),
        ("1+1=2;answer=2", 6),
        ("So \\boxed{54}.", 2),
        ("#### 54", 0),
        ("no answer here", 12),
        ("The answer is 7", 0),
    ],
)
def test_reasoning_is_what_a_completion_says_besides_its_final_answer(text, chars):
    from veriloop.rollout.index import reasoning_chars

    assert reasoning_chars(text) == chars


def test_the_shipped_base_is_where_the_report_looks_for_its_tokenizer():
    from veriloop.models.loading import BUILTIN_BASE
    from veriloop.report.data import load_tokenizer

    tok = load_tokenizer(BUILTIN_BASE.parent / "no-run", {"policy": "builtin:base"})  # no final/: the policy's
    assert tok is not None and tok.decode(tok.encode("12+3").ids) == "12+3"


def test_token_pieces_join_to_the_text_even_across_a_characters_bytes(tmp_path):
    """Byte-level BPE: a character of several UTF-8 bytes may take several tokens; each piece is what its token
    adds, so the pieces join to the decoded text and no piece shows half a character."""
    from veriloop.models.random_init import train_bpe_tokenizer
    from veriloop.report.data import TokenText

    tok = train_bpe_tokenizer(["plain ascii text 1+1=2"] * 20, 300, None)
    text = "1+1=2, 中文 ok ✓"
    ids = tok.encode(text, add_special_tokens=False)
    pieces = TokenText(tok)(ids)
    assert "".join(pieces) == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces) and "" in pieces  # the bytes of 中 before its last: no text yet
