"""Math-Shepherd's generative PRM (seed 004 s.3): the step verdict is a [GOOD] or [BAD] token the LM predicts at
each step's end, trained on the same labels as the scalar head and read the same way (a verifier, a search scorer,
process supervision).  By hand: the score is sigmoid(z_GOOD - z_BAD) of the LM's own logits, the loss the LM's
cross-entropy over the whole vocabulary.  The held-out AUC of both forms side by side: benchmarks/prm_forms.py."""

import json
import math

import pytest
import torch

from veriloop.errors import InputError
from veriloop.models.loading import load_policy
from veriloop.prm.label import LabelConfig, label_steps
from veriloop.prm.model import PRM, GenerativePRM, load_prm
from veriloop.prm.train import PRMTrainConfig, load_labels, train_prm
from veriloop.verifiers import get

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def fresh():
    return GenerativePRM(load_policy("builtin:base"), "semicolon", "{reference}?")


def test_the_verdict_tokens_join_the_vocabulary_and_start_neutral(fresh):
    base = load_policy("builtin:base")
    assert len(fresh.tokenizer) == len(base.tokenizer) + 2
    assert fresh.tokenizer.convert_ids_to_tokens([fresh.good_id, fresh.bad_id]) == ["[GOOD]", "[BAD]"]
    # both new rows start at the old rows' mean (tied input and output embeddings here): z_GOOD = z_BAD, so every
    # step scores exactly 1/2 before training, and the old tokens' logits are those of the base
    scores = fresh.score(["12+3?", "(2+3)*4?"], ["12+3=15;answer=15", "2+3=5;5*4=20;answer=20"])
    assert scores == [[0.5, 0.5], [0.5, 0.5, 0.5]]
    seq, _ = fresh.encode("12+3?", "12+3=15;answer=15")
    with torch.no_grad():
        new = fresh.backbone(torch.tensor([seq])).logits[0, :, : len(base.tokenizer)]
        old = base.model(torch.tensor([seq])).logits[0]
    assert torch.allclose(new, old, atol=1e-5)


def test_the_score_and_the_loss_by_hand(fresh):
    torch.manual_seed(0)
    with torch.no_grad():  # give the two verdict rows different directions, then read by hand
        w = fresh.backbone.get_output_embeddings().weight
        w[fresh.good_id] += 0.3 * torch.randn(w.shape[1])
        w[fresh.bad_id] -= 0.3 * torch.randn(w.shape[1])
    prompt, completion = "(2+3)*4?", "2+3=5;5*4=20;answer=20"
    seq, reads = fresh.encode(prompt, completion)
    with torch.no_grad():
        z = fresh.backbone(torch.tensor([seq])).logits[0, reads]  # [steps, vocab]: the LM's next-token logits
        diff = z[:, fresh.good_id] - z[:, fresh.bad_id]
        # the choice between the two tokens: log P(GOOD | {GOOD, BAD}) = log sigmoid(z_G - z_B), P(BAD | ...) likewise
        good, bad = torch.nn.functional.logsigmoid(diff), torch.nn.functional.logsigmoid(-diff)
        t = torch.tensor([1.0, 0.0, 1.0])
        ce = -(good[0] + bad[1] + good[2]) / 3
        soft = torch.tensor([0.25, 0.5, 1.0])
        soft_ce = -(soft * good + (1 - soft) * bad).mean()
        assert fresh.score([prompt], [completion])[0] == pytest.approx(torch.sigmoid(diff).tolist(), abs=1e-6)
        assert float(fresh.step_loss([seq], [reads], t, "bce")) == pytest.approx(float(ce), abs=1e-6)
        assert float(fresh.step_loss([seq], [reads], soft, "soft_ce")) == pytest.approx(float(soft_ce), abs=1e-6)
        assert len(set(torch.sigmoid(diff).tolist())) == 3  # the rows were moved: the steps differ
    with pytest.raises(InputError, match="bce or soft_ce"):
        fresh.step_loss([seq], [reads], t, "mse")
    with pytest.raises(InputError, match="hard labels"):
        fresh.step_loss([seq], [reads], soft, "bce")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Step labels of the base's own solutions (24 problems x 2, 2 completions a step); a generative PRM and a
    head PRM trained on them, 2 epochs each."""
    root = tmp_path_factory.mktemp("genprm")
    label_steps(LabelConfig(problems=24, solutions=2, completions=2, output=str(root / "labels.jsonl")), False)
    out = {}
    for form in ("generative", "head"):
        cfg = PRMTrainConfig(data=str(root / "labels.jsonl"), out=str(root / form), form=form, epochs=2)
        out[form] = train_prm(cfg, progress=False)
    return root, out


def test_a_trained_generative_prm_learns_its_labels_and_reads_back(trained):
    root, summaries = trained
    rows = load_labels(str(root / "labels.jsonl"))
    prm = load_prm(root / "generative")
    assert isinstance(prm, GenerativePRM) and prm.head is None
    assert not (root / "generative" / "prm_head.safetensors").exists()
    assert json.loads((root / "generative" / "prm.json").read_text())["form"] == "generative"
    assert isinstance(load_prm(root / "head"), PRM) and not isinstance(load_prm(root / "head"), GenerativePRM)
    # the loss fell below the untrained model's, log 2 (both tokens equal: every choice 1/2)
    assert summaries["generative"]["final_loss"] < math.log(2)
    # it ranks the labels it was trained on: steps labelled good score higher than those labelled bad
    scores = prm.score([r["prompt"] for r in rows], [r["completion"] for r in rows])
    good = [s for r, sc in zip(rows, scores) for s, h in zip(sc, r["hard_labels"]) if h]
    bad = [s for r, sc in zip(rows, scores) for s, h in zip(sc, r["hard_labels"]) if not h]
    assert good and bad and sum(good) / len(good) > sum(bad) / len(bad)
    # the verifier and every reader of a PRM take it as they take the head
    v = get("prm", path=str(root / "generative"))
    verdict = v.verify("2+3=5;5*4=20;answer=20", "(2+3)*4")
    assert len(verdict.steps) == 3 and 0 < verdict.score < 1


def test_mse_is_refused_for_the_generative_form(tmp_path):
    with pytest.raises(InputError, match="bce or soft_ce"):
        PRMTrainConfig(form="generative", loss="mse", labels="soft")
