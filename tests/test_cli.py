"""Every YAML under configs/ is parsed by the real CLI; bad configs fail at start-up naming the key."""

from pathlib import Path

import pytest

from lit_rlvr.run.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASES = [ROOT / "configs" / "tiny.yaml", ROOT / "configs" / "quickstart.yaml"]
METHODS = sorted((ROOT / "configs" / "methods").glob("*.yaml"))
GPU = sorted((ROOT / "configs" / "gpu").glob("*.yaml"))
PLAIN = ("grpo", "grpo_tuned")  # method configs without a selector
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
    if method.stem not in PLAIN:
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
    from lit_rlvr.selection import SelectionCallback
    from lit_rlvr.run.cli import LitRLVRCLI
    from lit_rlvr.data import PromptDataModule
    from lit_rlvr.module import GRPOModule

    for method in METHODS:
        cli = LitRLVRCLI(GRPOModule, PromptDataModule, run=False, parser_kwargs={"parser_mode": "omegaconf"},
                         args=["--config", str(BASES[0]), "--config", str(method), "--trainer.logger=false"])
        selectors = [cb for cb in cli.trainer.callbacks if isinstance(cb, SelectionCallback)]
        assert (len(selectors) == 0) == (method.stem in PLAIN), method.name


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


# ------------------------------------------------ start-up errors name the flag and the fix
def _start_up_error(capsys, *args: str) -> str:
    """Run `fit` on tiny.yaml with `args`; it must exit non-zero before training. The error text."""
    with pytest.raises((SystemExit, ValueError)) as exc:
        main(["fit", "--config", str(BASES[0]), "--trainer.logger=false", *args])
    assert not (isinstance(exc.value, SystemExit) and exc.value.code in (0, None))
    return str(exc.value) + capsys.readouterr().err


def _yaml(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_zero_max_new_tokens_blames_max_new_tokens(capsys):
    # before: "model.rollout.overlong_buffer must be in [0, max_new_tokens)"
    text = _start_up_error(capsys, "--model.rollout.max_new_tokens=0")
    assert "model.rollout.max_new_tokens=0" in text and ">= 1" in text and "overlong_buffer" not in text


def test_callback_init_error_names_the_key_and_the_callbacks_message(capsys, tmp_path):
    # before: jsonargparse's "Does not validate against any of the Union subtypes"
    pods = _yaml(tmp_path, "pods0.yaml", "trainer:\n  callbacks:\n    - class_path: lit_rlvr.callbacks.PODS\n"
                 "      init_args: {num_keep: 0}\n")
    text = _start_up_error(capsys, "--config", pods)
    assert "trainer.callbacks[0] (lit_rlvr.callbacks.PODS): PODS.num_keep must be >= 2" in text
    assert "Union subtypes" not in text


def test_any_class_path_init_error_is_unwrapped(capsys):
    """The same unwrapping for every class_path: here the data source's."""
    text = _start_up_error(capsys, "--data.source.init_args.tasks=no_such_task")
    assert "data.source (lit_rlvr.data.ReasoningGymSource): ReasoningGymSource: unknown task 'no_such_task'" in text


def test_one_generation_per_prompt_is_rejected(capsys):
    # before: ran with zero advantage on every step, silently
    text = _start_up_error(capsys, "--model.rollout.num_generations=1")
    assert "model.rollout.num_generations=1" in text and "set model.rollout.num_generations >= 2" in text


def test_unbounded_fit_is_rejected_at_start_up(capsys):
    # before: max_steps -1 on the infinite training stream ran forever
    text = _start_up_error(capsys, "--trainer.max_steps=-1")
    assert "trainer.max_steps=-1" in text and "infinite" in text and "--trainer.max_steps=N" in text


def test_two_allocator_method_configs_fail_naming_both_files(capsys):
    # before: the later --config replaced trainer.callbacks, so only SARA ran, silently
    vigor, sara = (str(ROOT / "configs" / "methods" / f"{m}.yaml") for m in ("vigor", "sara"))
    text = _start_up_error(capsys, "--config", vigor, "--config", sara)
    assert f"{vigor} and {sara} both set trainer.callbacks with a rollout allocator (VIGOR and SARA)" in text


def test_a_method_config_replacing_another_says_so(capsys):
    from lit_rlvr.run.cli import LitRLVRCLI
    from lit_rlvr.data import PromptDataModule
    from lit_rlvr.module import GRPOModule

    greso, pods = (str(ROOT / "configs" / "methods" / f"{m}.yaml") for m in ("greso", "pods"))
    LitRLVRCLI(GRPOModule, PromptDataModule, run=False, parser_kwargs={"parser_mode": "omegaconf"},
               args=["--config", str(BASES[0]), "--config", greso, "--config", pods, "--trainer.logger=false"])
    err = capsys.readouterr().err
    assert f"{pods} replaces trainer.callbacks set by {greso}: GRESO, DynamicSampling will not run, PODS will" in err


@pytest.mark.parametrize(
    "trainer, bounded",
    [
        ({"max_steps": -1}, False),
        ({"max_steps": None, "max_epochs": 3}, False),  # an epoch of the infinite stream never ends
        ({"max_steps": 0}, True),
        ({"max_steps": -1, "max_time": "00:01:00:00"}, True),
        ({"max_steps": -1, "limit_train_batches": 10, "max_epochs": 2}, True),
        ({"max_steps": -1, "limit_train_batches": 10, "max_epochs": -1}, False),
    ],
)
def test_what_bounds_a_fit(trainer, bounded):
    from lit_rlvr.run.config_checks import check_run_is_bounded

    assert (check_run_is_bounded(trainer) is None) == bounded


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
    assert printed["model"]["init_args"]["export_dir"] == "X/policy/{run}"  # {run}: the fit's version_N



def test_a_named_subcommand_builds_only_its_own_parser(capsys, monkeypatch):
    """``lit-rlvr fit ...`` builds fit's parser alone (each holds every trainer, model and data option: building
    all four was half of a start-up's parsing); without a leading subcommand all four are there, as before."""
    from lit_rlvr.run.cli import LitRLVRCLI

    built = []
    original = LitRLVRCLI._add_subcommands

    def record(self, parser, **kwargs):
        original(self, parser, **kwargs)
        built.append(sorted(self._subcommand_parsers))

    monkeypatch.setattr(LitRLVRCLI, "_add_subcommands", record)
    for args in (["fit", "--config", str(BASES[0]), "--print_config"], ["predict", "--config", str(BASES[0]), "--print_config"], ["--help"]):
        with pytest.raises(SystemExit):
            main(args)
    assert built == [["fit"], ["predict"], ["fit", "predict", "test", "validate"]]
    out = capsys.readouterr().out
    assert out.count("model:") >= 2 and "{fit,validate,test,predict}" in out


def test_a_method_config_is_read_whether_named_by_string_or_path():
    """config_checks reads a config's callbacks from a str, a pathlib.Path (whose .absolute is a method) or
    jsonargparse's Path alike (a pathlib.Path was silently skipped)."""
    from pathlib import Path

    from lit_rlvr.run.config_checks import _callbacks_of

    vigor = ROOT / "configs" / "methods" / "vigor.yaml"
    assert _callbacks_of(vigor) == _callbacks_of(str(vigor)) == ["lit_rlvr.callbacks.VIGOR"]
    assert isinstance(vigor, Path)
