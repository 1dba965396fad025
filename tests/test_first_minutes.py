"""A newcomer's first ten minutes: a missing data file is "file not found" at once, and a flag typo, a missing config
file and an unknown class each end on one line that points to --help, without argparse's usage dump."""

import socket
import time
from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.data import HFDatasetSource
from lit_rlvr.run.paths import looks_local

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a missing local file must not reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_a_missing_local_data_file_fails_at_once_naming_the_nearest_file(tmp_path, monkeypatch, no_network):
    # before: sent to the Hugging Face Hub, five retries, a ~50-line traceback 36 s in, the file never named
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    start = time.perf_counter()
    for path in ("data/trian.jsonl", "./data/train", "data/sub/train.jsonl"):
        with pytest.raises(ValueError, match=rf"no such file '{path}' .*the nearest existing file is 'data/train.jsonl'"):
            HFDatasetSource(path, val_split=None, val_size=1)
    with pytest.raises(ValueError, match="HFDatasetSource val_split: no such file 'data/test.jsonl'"):
        HFDatasetSource("data/train.jsonl", val_split="data/test.jsonl")
    assert time.perf_counter() - start < 2.0
    assert looks_local("x.jsonl") and looks_local("./gsm8k") and looks_local("a/b/c")
    assert not looks_local("openai/gsm8k") and not looks_local("json")  # Hub names and builder names stay remote


def test_a_missing_data_file_ends_the_command_before_the_model_is_built(tmp_path, monkeypatch, capsys, no_network):
    from lit_rlvr.run.cli import LitRLVRCLI

    def never(*args, **kwargs):
        raise AssertionError("the classes (the model first) were built before the data file was checked")

    monkeypatch.setattr(LitRLVRCLI, "instantiate_classes", never)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", TINY, "--data.source=lit_rlvr.data.HFDatasetSource",
              "--data.source.init_args.path=trian.jsonl", "--data.source.init_args.val_split=null",
              "--data.source.init_args.val_size=1"])
    message = str(info.value.code)
    assert message.startswith("lit-rlvr: data error: data.source.init_args.path: no such file 'trian.jsonl'")
    assert message.endswith("the nearest existing file is 'train.jsonl'") and "\n" not in message


def test_the_console_script_ends_a_missing_data_or_config_file_before_importing_lightning(tmp_path):
    # before: 36-43 s (Lightning's imports, the model, five Hub retries) and a ~50-line traceback
    import json
    import subprocess
    import sys

    (tmp_path / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    (tmp_path / "data.yaml").write_text("data:\n  source:\n    class_path: lit_rlvr.data.HFDatasetSource\n"
                                        "    init_args: {path: trian.jsonl, val_split: null, val_size: 1}\n")
    probe = ("import json, sys\nfrom lit_rlvr.run.launch import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    print(json.dumps([str(e.code), 'torch' in sys.modules, 'lightning' in sys.modules]))")
    for extra in (["--config", "data.yaml"], ["--data.source=lit_rlvr.data.HFDatasetSource",
                                               "--data.source.init_args.path=trian.jsonl",
                                               "--data.source.init_args.val_split=null", "--data.source.init_args.val_size=1"]):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", probe, "fit", "--config", TINY, *extra], cwd=tmp_path, timeout=60,
                              capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        elapsed = time.perf_counter() - start
        line, torch_loaded, lightning_loaded = json.loads(done.stdout.strip().splitlines()[-1])
        assert line == ("lit-rlvr: data error: data.source.init_args.path: no such file 'trian.jsonl' "
                        f"(from {tmp_path}); the nearest existing file is 'train.jsonl'")
        assert not torch_loaded and not lightning_loaded and elapsed < 2.0, elapsed
    done = subprocess.run([sys.executable, "-c", probe, "fit", "--config", str(ROOT / "configs" / "tinyy.yaml")],
                          cwd=ROOT, timeout=60, capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["2", False, False]
    assert done.stderr.strip() == ("--config: no such file 'configs/tinyy.yaml' (from " + str(ROOT) + "): did you "
                                   "mean --config configs/tiny.yaml? ('lit-rlvr fit --help' lists every option)")


@pytest.mark.parametrize("args, line", [
    (["--trainer.max_step=3"], "trainer does not accept option 'max_step': did you mean trainer.max_steps?"),
    (["--model.class_path=lit_rlvr.module.GRPOModul"],
     "model: class_path lit_rlvr.module.GRPOModul does not exist: lit_rlvr.module has no class GRPOModul; "
     "did you mean lit_rlvr.module.GRPOModule?"),
    (["--trainer.callbacks+=lit_rlvr.callbacks.GRESSO"],
     "trainer.callbacks: class_path lit_rlvr.callbacks.GRESSO does not exist: lit_rlvr.callbacks has no class "
     "GRESSO; did you mean lit_rlvr.callbacks.GRESO?"),
    (["--config", str(ROOT / "configs" / "tinyy.yaml")], "--config: no such file 'configs/tinyy.yaml' (from "),
])
def test_an_error_is_one_line_that_points_to_help_without_the_usage(capsys, monkeypatch, args, line):
    # before: 50-66 lines of argparse usage above the line
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", TINY, *args])
    assert info.value.code == 2
    text = capsys.readouterr().err
    err = [e for e in text.splitlines() if e.startswith(line)]
    assert len(err) == 1 and len([e for e in text.splitlines() if e.strip()]) <= 3, text  # the line, a warning, threads
    assert "lit-rlvr fit --" in err[0] and "usage:" not in text and "[--trainer" not in text
    if "tinyy" in line:
        assert err[0].endswith("did you mean --config configs/tiny.yaml? ('lit-rlvr fit --help' lists every option)")


def test_every_model_and_data_option_in_fit_help_has_a_description(capsys, monkeypatch):
    # before: 45 of them showed only "(type: ..., default: ...)"; the settings' field docstrings are their help now
    import re

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY, "--help"])
    text = capsys.readouterr().out
    tail = text[text.index("\nmodel options ("):]
    undocumented = []
    for entry in re.split(r"\n(?=  --)", tail):
        flag = entry.split()[0] if entry.startswith("  --") else ""
        if not flag or flag.endswith(".help"):
            continue
        words = " ".join(entry.split())
        description = re.sub(r"^\S+( [A-Z_\[\]{},.a-z]+)?(, \S+( \S+)?)?\s*", "", words, count=1)
        if description.startswith("(type:") or not description:
            undocumented.append(flag)
    assert len(re.findall(r"\n  --model\.", tail)) > 40 and undocumented == []
    assert "G: rollouts per prompt (the group size)" in " ".join(tail.split())


def test_a_fit_that_fails_before_its_first_step_leaves_no_version_folder(tmp_path, monkeypatch):
    # before: an empty csv/version_0 (and tensorboard/version_0 with a header-only event file) per failed fit
    monkeypatch.delenv("LIT_RLVR_DEBUG", raising=False)
    (tmp_path / "empty.jsonl").write_text("")
    config = tmp_path / "data.yaml"
    config.write_text(f"data:\n  source:\n    class_path: lit_rlvr.data.HFDatasetSource\n    init_args:\n"
                      f"      path: {tmp_path / 'empty.jsonl'}\n      val_split: null\n      val_size: 1\n")
    root = tmp_path / "runs"
    (root / "csv" / "version_0").mkdir(parents=True)  # an earlier run's folder is never touched
    (root / "csv" / "version_0" / "metrics.csv").write_text("step\n0\n")
    with pytest.raises(SystemExit, match="empty.jsonl"):
        main(["fit", "--config", TINY, "--config", str(config), f"--trainer.default_root_dir={root}"])
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "csv", "csv/version_0", "csv/version_0/metrics.csv", "tensorboard"]


def _guide_command() -> list[str]:
    """The command docs/writing_a_selector.md prints above the selector's config, word by word."""
    text = (ROOT / "docs" / "writing_a_selector.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("# lit-rlvr fit ") and "skip_solved.yaml" in x)
    return line[2:].split()


def _as_printed(*extra: str, cwd: Path = ROOT):
    import subprocess
    import sys

    args = _guide_command()
    script = Path(sys.executable).parent / args[0]  # the installed console script, not python -m
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(script), *args[1:], *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_selector_guides_command_finds_its_class_in_the_working_directory():
    # before: "class_path tests.examples.skip_solved.SkipSolved does not import (no module tests.examples.skip_solved)"
    done = _as_printed("--print_config")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "class_path: tests.examples.skip_solved.SkipSolved" in done.stdout


@pytest.mark.integration  # a real tiny fit through the console script
def test_the_selector_guides_command_runs_as_printed(tmp_path):
    done = _as_printed(f"--trainer.default_root_dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "lit-rlvr: fit finished after 4 training steps" in done.stdout
    assert "select/SkipSolved/" in next(tmp_path.glob("csv/version_0/metrics.csv")).read_text()


def test_a_lora_policy_loads_without_a_future_warning():
    # before: peft's PeftModel read transformers' deprecated is_gradient_checkpointing on every LoRA fit
    import warnings

    from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_policy(PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8)))
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
