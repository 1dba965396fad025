"""The real ``lit-rlvr`` command line: a mistake ends on one line naming it, the file or flag, and the fix;
two fits in one folder stay two runs; a resume continues its own run or says why it cannot.

Every case runs the command in a subprocess with the shipped configs and reads the last
non-empty line of stderr (what a user sees above the prompt).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
METHODS = ROOT / "configs" / "methods"


def _run(*args: str, cwd: Path = ROOT, ok: bool = False, script: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = script or [sys.executable, "-m", "lit_rlvr.run.cli", *args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert (done.returncode == 0) == ok, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return done


def _last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def _fails_with(*args: str, cwd: Path = ROOT) -> str:
    return _last_line(_run(*args, cwd=cwd).stderr)


# ------------------------------------------------------------------ item: method configs, whatever the other flags
@pytest.mark.integration
def test_two_allocator_method_configs_fail_through_the_real_command_line():
    # before: the shipped configs' loggers (omegaconf+ interpolation) hid the --config files from the check,
    # so this trained SARA alone and exited 0
    vigor, sara = str(METHODS / "vigor.yaml"), str(METHODS / "sara.yaml")
    line = _fails_with("fit", "--config", TINY, "--config", vigor, "--config", sara, "--trainer.max_steps=1")
    assert f"{vigor} and {sara} both set trainer.callbacks with a rollout allocator (VIGOR and SARA)" in line
    assert "Pass one of the two method configs" in line


@pytest.mark.integration
def test_a_method_config_replacing_another_says_so_with_loggers_configured():
    greso, pods = str(METHODS / "greso.yaml"), str(METHODS / "pods.yaml")
    # num_generations=1 stops the run at start-up, right after the notices
    err = _run("fit", "--config", TINY, "--config", greso, "--config", pods, "--model.rollout.num_generations=1").stderr
    assert f"{pods} replaces trainer.callbacks set by {greso}: GRESO, DynamicSampling will not run, PODS will" in err


# ------------------------------------------------------------------ item: the last line is the useful one
@pytest.mark.parametrize(
    "flag, expected",
    [
        ("--model.loss.epsilon_hgih=0.3",
         "model.loss (lit_rlvr.module.GRPOModule) does not accept option 'epsilon_hgih': did you mean model.loss.epsilon_high?"),
        ("--data.batch_sise=4", "data (lit_rlvr.data.PromptDataModule) does not accept option 'batch_sise': did you mean data.batch_size?"),
        ("--trainer.max_stepz=4", "trainer does not accept option 'max_stepz': did you mean trainer.max_steps?"),
    ],
)
@pytest.mark.integration
def test_an_unknown_key_ends_on_does_not_accept_option(flag, expected):
    # before: the last line was "Given value: NestedArg(key='loss.epsilon_hgih', val='0.3')" of a Union dump
    line = _fails_with("fit", "--config", TINY, flag)
    # the line ends naming the command that lists the option: `lit-rlvr fit --model.help CLASS`, `--data.help
    # CLASS`, or `lit-rlvr fit --help` for the trainer's
    group = flag[2:].split(".", 1)[0]
    shows = "lit-rlvr fit --help" if group == "trainer" else f"lit-rlvr fit --{group}.help lit_rlvr."
    assert line.startswith(expected) and shows in line, line


@pytest.mark.integration
def test_an_unknown_key_in_a_config_file_ends_on_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  rollout:\n    num_generationz: 4\n")
    line = _fails_with("fit", "--config", TINY, "--config", str(bad))
    assert "model.rollout (lit_rlvr.module.GRPOModule) does not accept option 'num_generationz'" in line
    assert "did you mean model.rollout.num_generations?" in line


@pytest.mark.integration  # the real command line in a fresh process, like the other error-line tests here
@pytest.mark.parametrize("how", ["flag", "file"])
def test_a_class_path_typo_suggests_the_class(tmp_path, how):
    if how == "flag":
        args = ["--trainer.callbacks+=lit_rlvr.callbacks.GRESSO"]
    else:
        (tmp_path / "m.yaml").write_text("trainer:\n  callbacks:\n    - class_path: lit_rlvr.callbacks.GRESSO\n")
        args = ["--config", str(tmp_path / "m.yaml")]
    line = _fails_with("fit", "--config", TINY, *args)
    assert line.startswith("trainer.callbacks: class_path lit_rlvr.callbacks.GRESSO does not exist")
    assert "did you mean lit_rlvr.callbacks.GRESO?" in line


@pytest.mark.integration
def test_print_config_comments_says_what_it_needs():
    try:
        import ruamel.yaml  # noqa: F401

        pytest.skip("ruamel.yaml is installed: --print_config=comments works")
    except ImportError:
        pass
    line = _fails_with("fit", "--config", TINY, "--print_config=comments")
    assert "--print_config=comments needs the ruamel.yaml package" in line and "lit-rlvr fit --help" in line


DPO = ["fit", "--config", str(ROOT / "configs" / "g2d" / "dpo.yaml"),
       "--config", str(ROOT / "tests" / "configs" / "g2d_tiny" / "dpo.yaml"), "--data.pairs=pairs.jsonl",
       "--trainer.max_steps=1", "--model.export_dir=null", "--trainer.logger=false"]
PAIR = {"prompt": "Calculate 1 + 1.", "chosen": "2", "rejected": "3", "prompt_id": 0}


@pytest.mark.parametrize(
    "row, expected",
    [
        (b'{"prompt": "Calculate 2 + 2.", "chosen": "4", "rejected": "caf\xe9"}', "pairs.jsonl: row 2 is not UTF-8 (byte 0xe9"),
        (json.dumps({**PAIR, "prompt_id": "seven"}).encode(),
         "pairs.jsonl: row 2: field 'prompt_id' must be an integer (the training prompt's index), got 'seven'"),
    ],
    ids=["non-utf8", "prompt_id"],
)
@pytest.mark.integration
def test_a_bad_preference_row_ends_on_the_file_and_row(tmp_path, row, expected):
    # before: a bare UnicodeDecodeError / "invalid literal for int() with base 10: 'seven'"
    (tmp_path / "pairs.jsonl").write_bytes(json.dumps(PAIR).encode() + b"\n" + row + b"\n")
    line = _fails_with(*DPO, cwd=tmp_path)
    assert expected in line and "fix that row" in line


# ------------------------------------------------------------------ items: one run per fit, resume into it
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Fit A (GRESO) and fit B (plain GRPO), 2 steps each, in the same runs/tiny; then resume A to step 4."""
    work = tmp_path_factory.mktemp("runs")
    common = ["fit", "--config", TINY, "--trainer.val_check_interval=2", "--model.export_dir=runs/tiny/policy/{run}"]
    a = _run(*common, "--config", str(METHODS / "greso.yaml"), "--trainer.max_steps=2", cwd=work, ok=True)
    b = _run(*common, "--trainer.max_steps=2", cwd=work, ok=True)
    ckpt = "runs/tiny/csv/version_0/checkpoints/last.ckpt"
    resumed = _run(*common, "--config", str(METHODS / "greso.yaml"), "--trainer.max_steps=4", f"--ckpt_path={ckpt}",
                   cwd=work, ok=True)
    return work, a.stdout + a.stderr, b.stdout + b.stderr, resumed.stdout + resumed.stderr, common, ckpt


@pytest.mark.integration
def test_each_fit_is_its_own_run_with_its_own_export(two_runs):
    # before: both fits exported to runs/tiny/policy (B replaced A's model)
    work, a, b, _, _, _ = two_runs
    assert "runs/tiny/csv/version_0/metrics.csv" in a and "runs/tiny/policy/version_0" in a
    assert "runs/tiny/csv/version_1/metrics.csv" in b and "runs/tiny/policy/version_1" in b
    for v in (0, 1):
        assert (work / f"runs/tiny/policy/version_{v}/adapter_config.json").exists() or \
            (work / f"runs/tiny/policy/version_{v}/config.json").exists()
        assert (work / f"runs/tiny/tensorboard/version_{v}").is_dir()  # the same N for every logger
    assert not (work / "runs/tiny/csv/version_2").exists()  # the resume wrote into version_0


@pytest.mark.integration  # shares its fixture's real fits with the other end-to-end tests of this file
def test_a_resume_writes_into_its_own_run_and_summarises_it_truly(two_runs):
    # before: the resume opened version_2, its summary named a metrics.csv that did not exist there
    # ("plot none (needs a CSVLogger)", "not measured ... limit_val_batches") when it had nothing to train
    work, _, _, resumed, _, _ = two_runs
    summary = resumed[resumed.index("lit-rlvr: fit finished"):]
    assert "fit finished after 4 training steps" in summary
    assert re.search(r"held-out accuracy\s+before\s+after 4 steps", summary)
    assert "runs/tiny/csv/version_0/metrics.csv" in summary and "runs/tiny/csv/version_0/reward.png" in summary
    import csv

    with open(work / "runs/tiny/csv/version_0/metrics.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f) if r.get("reward/mean")]
    assert sorted(set(steps)) == [0, 1, 2, 3]


@pytest.mark.integration  # shares its fixture's real fits with the other end-to-end tests of this file
def test_plot_run_plots_one_run_into_its_folder(two_runs):
    # before: merged both fits' metrics and wrote reward.png into the working directory
    work, *_ = two_runs
    out = _run("plot", "runs/tiny", cwd=work, ok=True).stdout
    assert "wrote runs/tiny/csv/version_1/reward.png" in out
    assert not (work / "reward.png").exists()


@pytest.mark.integration
def test_a_resume_without_the_runs_method_config_says_so(two_runs):
    work, _, _, _, common, ckpt = two_runs
    line = _fails_with(*common, "--trainer.max_steps=6", f"--ckpt_path={ckpt}", cwd=work)
    assert f"--ckpt_path {ckpt}: the run used the selection callbacks [GRESO, DynamicSampling], this command [none]" in line
    assert "pass the method config the run used or resume with --config runs/tiny/csv/version_0/config.yaml" in line


@pytest.mark.integration
def test_a_resume_with_another_group_size_says_so(two_runs):
    work, _, _, _, common, ckpt = two_runs
    line = _fails_with(*common, "--config", str(METHODS / "greso.yaml"), "--trainer.max_steps=6",
                       "--model.rollout.num_generations=2", f"--ckpt_path={ckpt}", cwd=work)
    assert "the run used model.rollout.num_generations=4, this command 2" in line
    assert "pass --model.rollout.num_generations=4" in line


@pytest.mark.integration
def test_a_resume_with_nothing_left_to_train_says_how_to_continue(two_runs):
    work, _, _, _, common, ckpt = two_runs
    done = _run(*common, "--config", str(METHODS / "greso.yaml"), "--trainer.max_steps=4", f"--ckpt_path={ckpt}",
                cwd=work, ok=True)
    line = _last_line(done.stdout)
    assert "nothing trained" in line and "already at step 4" in line and "--trainer.max_steps" in line


@pytest.mark.integration
def test_a_reward_that_cannot_be_imported_ends_on_one_line(tmp_path):
    # the module is imported in a sandboxed worker, never in the trainer; its error comes back as the last line
    (tmp_path / "myreward.py").write_text("def score(completion, answer, metadata):\n    return 1.0\n")
    rewards = '[{"class_path": "lit_rlvr.rewards.CallableReward", "init_args": {"fn": "myreward:scoer"}}]'
    line = _fails_with("fit", "--config", TINY, "--trainer.max_steps=1", f"--model.rewards={rewards}", cwd=tmp_path)
    assert "model.rewards[0]" in line and "cannot import 'myreward:scoer': 'myreward' has no attribute 'scoer'" in line
