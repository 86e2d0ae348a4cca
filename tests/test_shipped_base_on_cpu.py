"""The shipped base (``veriloop/assets/base``) is what every measured table was made with: its files match the
sums committed beside it, ``make base`` remakes it elsewhere, and no export may be written over it."""

import re
from pathlib import Path

import pytest

from veriloop.config import load_yaml
from veriloop.errors import InputError
from veriloop.models.loading import BUILTIN_BASE
from veriloop.training.run.export import SUMS_FILE, refuse_shipped_base, shipped_base_sums

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_base_matches_its_committed_sums():
    # A changed, added or removed file of the shipped base fails here; after a deliberate replacement
    # (docs/concepts/builtin-task.md: which remake, chosen how), regenerate the sums with
    # `sha256sum * > ../base.sha256` in the directory.
    assert shipped_base_sums() == SUMS_FILE.read_text()
    names = [line.split("  ", 1)[1] for line in SUMS_FILE.read_text().splitlines()]
    assert "model.safetensors" in names and "config.json" in names


@pytest.mark.parametrize("where", ["", "model", "nested/dir"])
def test_an_export_into_the_shipped_base_is_refused_with_the_alternative(where):
    target = BUILTIN_BASE / where
    with pytest.raises(InputError, match=r"is the shipped base model .*--export runs/base-remake/model"):
        refuse_shipped_base(str(target))
    spelled = BUILTIN_BASE.parent / ".." / "assets" / "base"  # another spelling of the same directory
    with pytest.raises(InputError, match="shipped base"):
        refuse_shipped_base(str(spelled))


def test_an_export_elsewhere_passes(tmp_path):
    refuse_shipped_base("")  # no export
    refuse_shipped_base(str(tmp_path / "model"))
    refuse_shipped_base(str(BUILTIN_BASE.parent / "base-remake"))  # a sibling, not the base
    fake = tmp_path / "assets" / "base"  # the check is against the package's own directory
    with pytest.raises(InputError, match=r"is the shipped base model .*--export runs/base-remake/model"):
        refuse_shipped_base(str(fake / "x"), base=fake)


def test_make_base_remakes_into_its_own_run_directory_and_checks_the_shipped_files():
    cfg = load_yaml(ROOT / "configs" / "sft-base.yaml")
    refuse_shipped_base(cfg["export"])
    run_dir = (ROOT / cfg["run_dir"]).resolve()
    assert BUILTIN_BASE.parent.resolve() not in run_dir.parents and cfg["run_dir"] == "runs/base-remake"
    target = re.search(r"^base:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "veriloop sft --config configs/sft-base.yaml" in target
    assert "sha256sum --quiet -c ../base.sha256" in target


def test_an_export_over_the_shipped_base_is_refused_before_anything_runs():
    from veriloop.config import ConfigError, build_config
    from veriloop.training.config import TrainConfig

    for export in (str(BUILTIN_BASE), str(BUILTIN_BASE / "sub")):
        with pytest.raises(ConfigError, match="is the shipped base model .* e.g. --export runs/base-remake/model"):
            build_config(TrainConfig, {}, {"export": export})
    assert build_config(TrainConfig, {}, {"export": "runs/x/model"}).export == "runs/x/model"
