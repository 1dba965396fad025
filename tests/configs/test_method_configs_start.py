"""Every method config starts on top of each base config: ``lit-rlvr fit --config <base> --config <method>``
runs the real CLI through parsing, instantiation, model loading, data set-up and every selector's
set-up-time composition checks (``setup_selection``), and stops at the first training hook."""

from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.module import GRPOModule

ROOT = Path(__file__).resolve().parents[2]
BASES = [ROOT / "configs" / "tiny.yaml", ROOT / "configs" / "quickstart.yaml"]
METHODS = sorted((ROOT / "configs" / "methods").glob("*.yaml"))


class Started(Exception):
    """Raised at ``on_train_start``: every set-up check has passed."""


def _start(monkeypatch, *configs: Path, extra=()):
    seen = {}

    def stop(module):
        seen["callbacks"] = [type(cb).__name__ for cb in module.trainer.callbacks]
        seen["module"] = module
        raise Started

    monkeypatch.setattr(GRPOModule, "on_train_start", stop)
    args = ["fit"]
    for c in configs:
        args += ["--config", str(c)]
    with pytest.raises(Started):
        main(args + ["--trainer.logger=false", *extra])
    return seen


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
@pytest.mark.parametrize("base", BASES, ids=lambda p: p.stem)
def test_method_config_starts_on_each_base(monkeypatch, base, method):
    seen = _start(monkeypatch, base, method)
    if method.stem != "grpo":
        assert any(name not in ("ModelCheckpoint", "RunSummary") for name in seen["callbacks"])
    if method.stem == "arrol":  # detect_tokens unset: a quarter of the base's max_new_tokens
        (arrol,) = [cb for cb in seen["module"].trainer.callbacks if type(cb).__name__ == "ARRoL"]
        assert arrol.detect_tokens == {"tiny": 2, "quickstart": 3}[base.stem]


def test_a_detect_length_longer_than_the_completions_fails_at_start(monkeypatch):
    """The check the composition test relies on is live: the paper's 512 on 8-token completions fails."""
    with pytest.raises(ValueError, match=r"ARRoL.detect_tokens=512 must be in \[1, model.rollout.max_new_tokens=8\)"):
        _start(monkeypatch, BASES[0], ROOT / "configs" / "methods" / "arrol.yaml",
               extra=["--trainer.callbacks.init_args.detect_tokens=512"])
