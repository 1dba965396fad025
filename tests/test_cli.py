"""Every YAML under configs/ is parsed by the real CLI; bad configs fail at start-up naming the key."""

from pathlib import Path

import pytest

from lit_rlvr.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASES = [ROOT / "configs" / "tiny.yaml", ROOT / "configs" / "quickstart.yaml"]
METHODS = sorted((ROOT / "configs" / "methods").glob("*.yaml"))
GPU = sorted((ROOT / "configs" / "gpu").glob("*.yaml"))
OTHER = sorted(set((ROOT / "configs").rglob("*.yaml")) - set(BASES) - set(METHODS) - set(GPU))


def _print_config(capsys, *configs: Path) -> str:
    args = ["fit"]
    for c in configs:
        args += ["--config", str(c)]
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--print_config"])
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("base", BASES, ids=lambda p: p.name)
def test_base_configs_parse(capsys, base):
    out = _print_config(capsys, base)
    assert "model:" in out and "data:" in out


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.name)
@pytest.mark.parametrize("base", BASES, ids=lambda p: p.name)
def test_method_configs_compose_with_each_base(capsys, base, method):
    out = _print_config(capsys, base, method)
    if method.stem != "grpo":
        assert "lit_rlvr.callbacks." in out


@pytest.mark.parametrize("gpu", GPU, ids=lambda p: p.name)
def test_gpu_configs_parse(capsys, gpu):
    _print_config(capsys, gpu)


@pytest.mark.parametrize("config", OTHER, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_every_other_config_parses(capsys, config):
    """Benchmark configs and anything else under configs/ (standalone, or on top of tiny.yaml)."""
    try:
        _print_config(capsys, config)
    except (SystemExit, AssertionError):
        _print_config(capsys, BASES[0], config)


def test_method_configs_instantiate_their_selectors():
    """Beyond parsing: the CLI builds each selector from its init_args (no fit)."""
    from lit_rlvr.callbacks.base import SelectionCallback
    from lit_rlvr.cli import LitRLVRCLI
    from lit_rlvr.data import PromptDataModule
    from lit_rlvr.module import GRPOModule

    for method in METHODS:
        cli = LitRLVRCLI(GRPOModule, PromptDataModule, run=False, parser_kwargs={"parser_mode": "omegaconf"},
                         args=["--config", str(BASES[0]), "--config", str(method), "--trainer.logger=false"])
        selectors = [cb for cb in cli.trainer.callbacks if isinstance(cb, SelectionCallback)]
        assert (len(selectors) == 0) == (method.stem == "grpo"), method.name


def test_unknown_key_fails_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(BASES[0]), "--model.loss.epsilon_hgih=0.3"])
    assert exit_info.value.code != 0
    assert "epsilon_hgih" in capsys.readouterr().err


def test_bad_value_fails_naming_the_flag(capsys):
    with pytest.raises((SystemExit, ValueError)) as exc:
        main(["fit", "--config", str(BASES[0]), "--model.loss.aggregation=sum", "--trainer.max_steps=1"])
    text = str(exc.value) + capsys.readouterr().err
    assert "aggregation" in text


def test_gpu_config_without_a_gpu_fails_at_start_up(capsys):
    import torch

    if torch.cuda.is_available() or not GPU:
        pytest.skip("needs a machine without CUDA and a GPU config")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(GPU[0])])
    assert "no CUDA GPU" in str(exit_info.value)


def test_default_root_dir_moves_logs_and_checkpoints(tmp_path):
    main(["fit", "--config", str(BASES[0]), "--trainer.max_steps=2", "--trainer.limit_val_batches=0",
          "--trainer.default_root_dir", "elsewhere"])
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written and all(p.startswith("elsewhere/") for p in written), written
    for path in ["elsewhere/csv/version_0/metrics.csv", "elsewhere/csv/version_0/checkpoints/last.ckpt"]:
        assert path in written, (path, written)


@pytest.mark.parametrize("config", [BASES[1], *GPU], ids=lambda p: p.name)
def test_default_root_dir_moves_the_export_and_every_logger(capsys, config):
    args = ["fit", "--config", str(config), "--trainer.default_root_dir", "X", "--print_config"]
    with pytest.raises(SystemExit):
        main(args)
    import yaml

    printed = yaml.safe_load(capsys.readouterr().out)
    assert [lg["init_args"]["save_dir"] for lg in printed["trainer"]["logger"]] == ["X"] * len(printed["trainer"]["logger"])
    assert printed["model"]["export_dir"] == "X/policy"
