"""One registry mechanism; validation reads it; something registered outside the package trains from the CLI."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from veriloop import cli
from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError, UnknownNameError
from veriloop.registry import Registry
from veriloop.training.config import TrainConfig

PLUGINS = Path(__file__).parent / "plugins"


def test_registry_refuses_silent_replacement_and_names_the_known_entries():
    reg = Registry("widget")
    reg.register("a", 1)

    @reg.register("b")
    def b():
        return 2

    assert reg.get("a") == 1 and reg["b"] is b and reg.names() == ["a", "b"] and "a" in reg
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", 3)
    reg.register("a", 3, replace=True)
    with pytest.raises(UnknownNameError, match="unknown widget 'c'; known: a, b"):
        reg.get("c")
    with pytest.raises(KeyError, match="unknown widget 'c'"):  # an UnknownNameError is a KeyError too
        reg.get("c")


def test_validation_reads_the_registries():
    with pytest.raises(ConfigError, match="unknown advantage estimator 'nope'; known: dr_grpo, filter, gae"):
        build_config(TrainConfig, {}, {"advantage.estimator": "nope"})
    with pytest.raises(ConfigError, match="unknown policy objective 'nope'"):
        build_config(TrainConfig, {}, {"loss.policy_loss": "nope"})


def test_an_external_estimator_and_objective_train_from_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(PLUGINS))
    args = [
        "train",
        "--run_dir",
        str(tmp_path / "run"),
        "--steps",
        "2",
        "--rollout.prompts_per_step",
        "4",
        "--rollout.group_size",
        "4",
        "--sampling.max_new_tokens",
        "32",
        "--kl.beta",
        "0",
        "--threads",
        "1",
        "--advantage.estimator",
        "centred_sign",
        "--loss.policy_loss",
        "capped_pg",
        "--quiet",
    ]
    assert cli.main(args) == 2  # without the plugin the names are unknown, and the message says so
    assert "unknown advantage estimator 'centred_sign'" in capsys.readouterr().err
    assert cli.main(["--plugin", "veriloop_example_plugin", *args]) == 0
    import veriloop_example_plugin as plugin

    assert plugin.CALLS["estimator"] == 2 and plugin.CALLS["objective"] > 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[-1]["policy_version"] > 0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "centred_sign" in saved and "capped_pg" in saved
    # the plugin's declarations are checked like a built-in's: it compares within groups
    with pytest.raises(ConfigError, match="group_size must be >= 2 for estimator centred_sign"):
        build_config(TrainConfig, {}, {"advantage.estimator": "centred_sign", "rollout.group_size": 1})


def test_a_missing_plugin_is_an_input_error(capsys):
    assert cli.main(["--plugin", "no_such_module_here", "algos"]) == 2
    assert "no_such_module_here" in capsys.readouterr().err


def test_an_entry_registered_by_path_is_listed_without_its_import_and_resolved_on_first_use(monkeypatch, tmp_path):
    (tmp_path / "lazy_widgets.py").write_text("IMPORTS = []\nIMPORTS.append(1)\nTABLE = {'w-1': 'one'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("widget")
    reg.register_path("w", "lazy_widgets:TABLE.w-1")
    assert reg.names() == ["w"] and "w" in reg and reg.choices() == "w"
    assert "lazy_widgets" not in sys.modules  # listed, not imported
    assert reg.get("w") == "one" and reg.get("w") == "one"
    assert sys.modules["lazy_widgets"].IMPORTS == [1]
    with pytest.raises(ValueError, match="already registered"):
        reg.register_path("w", "lazy_widgets:TABLE")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("w", object())


def test_the_built_in_names_are_listed_without_loading_torch():
    code = (
        "import sys\nfrom veriloop.registry import REGISTRIES\n"
        "for r in REGISTRIES: r.names()\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_verifier_is_what_the_protocol_says_whether_subclassed_or_not():
    from veriloop import verifiers
    from veriloop.registry import VERIFIERS
    from veriloop.verifiers import Verdict

    class Structural:  # no base class: a Verifier by its members alone
        name, version = "structural", "2"

        def verify(self, completion, reference):
            return Verdict(float(completion == reference), version=f"{self.name}@{self.version}")

        def verify_batch(self, completions, references):
            return [self.verify(c, r) for c, r in zip(completions, references)]

    VERIFIERS.register("structural", Structural)
    VERIFIERS.register("not-a-verifier", lambda: object())
    try:
        assert verifiers.get("structural").verify_batch(["a", "b"], ["a", "a"])[1].score == 0.0
        with pytest.raises(InputError, match="verifier 'not-a-verifier' built a object, which is not a Verifier: it"):
            verifiers.get("not-a-verifier")
    finally:
        VERIFIERS.unregister("structural")
        VERIFIERS.unregister("not-a-verifier")
    with pytest.raises(InputError, match="reward source 'five' is not callable"):
        verifiers.from_reward_function(5, name="five")
