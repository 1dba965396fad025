"""What ``lit-rlvr fit`` prints: the end-of-fit summary and plot, lit-rlvr's own log lines, no Lightning noise.

One fit of the tiny config and its resume into the same run (version_0), each in a subprocess (console
output and logging set-up are per process), checked for every line of issue 12 (items 15, 16).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
NOISE = [
    "💡 Tip",  # Lightning's litlogger / litmodels adverts
    "litlogger",
    "litmodels",
    "FLOPs",  # the model summary's column, always 0
    "Total Flops",
    "`isinstance(treespec, LeafSpec)` is deprecated",
    "will override existing callbacks",  # configure_callbacks' ModelCheckpoint
    "Trainer already configured with model summary callbacks",
    "dirpath has changed",  # a resume into a new version_N (resumes now write into their own run)
    "Epoch 0/-2",
]


def _fit(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, "--trainer.val_check_interval=2", *args],
        capture_output=True, text=True, env=env, timeout=600,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    return text


@pytest.fixture(scope="module")
def fit_and_resume(tmp_path_factory) -> tuple[Path, str, str]:
    """A 2-step fit, then its resume to step 4 (exporting the policy), under one tmp dir."""
    work = tmp_path_factory.mktemp("console")
    cwd = os.getcwd()
    os.chdir(work)
    try:
        first = _fit("--trainer.max_steps=2")
        resumed = _fit("--trainer.max_steps=4", "--model.export_dir=runs/tiny/policy",
                       "--ckpt_path=runs/tiny/csv/version_0/checkpoints/last.ckpt")
    finally:
        os.chdir(cwd)
    return work, first, resumed


@pytest.mark.parametrize("noise", NOISE)
@pytest.mark.integration
def test_a_fit_and_its_resume_print_no_noise(fit_and_resume, noise):
    _, first, resumed = fit_and_resume
    assert noise not in first
    assert noise not in resumed


@pytest.mark.integration  # shares its fixture's real fits with the other end-to-end tests of this file
def test_progress_counts_steps_of_max_steps(fit_and_resume):
    _, first, resumed = fit_and_resume
    assert re.search(r"Step\b.*\b2/2\b", first) and re.search(r"Step\b.*\b4/4\b", resumed)


@pytest.mark.integration  # shares its fixture's real fits with the other end-to-end tests of this file
def test_output_to_a_pipe_logs_a_progress_line(fit_and_resume):
    # before: nothing between the evaluation before training and the summary when the output is not a terminal
    _, first, resumed = fit_and_resume
    assert re.search(r"lit-rlvr: step 1/2: 16 rollouts so far, reward \d\.\d{3}, [\d.]+ s/step \(this step [\d.]+ s\), "
                     r"about .* left", first)
    assert "lit-rlvr: step 2/2: 32 rollouts so far" in first  # the last step always gets its line
    assert "lit-rlvr: step 4/4: 64 rollouts so far" in resumed  # counters continue across the resume


@pytest.mark.integration  # shares its fixture's real fits with the other end-to-end tests of this file
def test_the_before_training_line_prints_once(fit_and_resume):
    _, first, resumed = fit_and_resume
    assert first.count("held-out accuracy before training: {'val/pass@1': ") == 1
    assert "held-out accuracy before training" not in resumed  # a resumed run has trained already


@pytest.mark.integration  # shares its fixture's real fits with the other end-to-end tests of this file
def test_the_end_of_fit_summary_names_the_run_and_its_files(fit_and_resume):
    work, first, resumed = fit_and_resume
    v0 = "runs/tiny/csv/version_0"
    assert "lit-rlvr: fit finished after 2 training steps" in first
    assert "lit-rlvr: fit finished after 4 training steps" in resumed
    summary = resumed[resumed.index("lit-rlvr: fit finished"):]
    # before (logged before training, earlier in the same metrics.csv) and after the last evaluation (step 4)
    assert re.search(r"held-out accuracy\s+before\s+after 4 steps", summary)
    assert re.search(r"val/pass@1\s+\d\.\d{3}\s+\d\.\d{3}", summary)
    assert re.search(r"val/mean@2\s+\d\.\d{3}\s+\d\.\d{3}", summary)
    assert "64 generated, " in summary and "(in the gradient" in summary  # 4 steps x 4 prompts x G = 4
    for path in [f"{v0}/metrics.csv", "runs/tiny/tensorboard/version_0", f"{v0}/checkpoints/last.ckpt",
                 "runs/tiny/policy", f"{v0}/reward.png"]:
        assert path in summary, path
        assert (work / path).exists(), path
    assert not (work / "runs/tiny/csv/version_1").exists()  # the resume wrote on into its own run
    assert f"{v0}/reward.png" in first and "exported policy       none (set model.export_dir)" in first
    assert (work / v0 / "reward.png").read_bytes()[:4] == b"\x89PNG"
    assert "held-out accuracy near 0.000 is expected" in first  # the random tiny policy, after the summary


def test_the_log_handler_follows_stderr_when_it_is_replaced(monkeypatch):
    # before: the handler kept the stderr of its creation; a second fit in the same process (the benchmarks'
    # fit workers redirect stderr to each fit's log file) logged "--- Logging error ---" to the closed first file
    import io
    import logging

    from lit_rlvr.run.console import CurrentStderrHandler

    logger = logging.getLogger("lit_rlvr.test_handler")
    monkeypatch.setattr(logger, "propagate", False)
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler = CurrentStderrHandler()
    logger.addHandler(handler)
    try:
        logger.warning("one")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        logger.warning("two")
    finally:
        logger.removeHandler(handler)
    assert second.getvalue() == "two\n"
