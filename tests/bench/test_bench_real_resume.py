"""benchmarks/bench_real.py run: a cell killed with SIGKILL resumes from its last checkpoint and writes the
result file a run never stopped writes (seconds aside); checkpoints change no number."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 16 * 24  # 24 steps of 4 prompts x 4 rollouts


def _config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["trainer"].update(max_steps=1000, limit_val_batches=0, default_root_dir=".", enable_checkpointing=False)
    cfg["trainer"]["logger"] = cfg["trainer"]["logger"][:1]  # the CSV logger
    cfg["model"]["checkpoint_every_n_steps"] = None
    cfg["model"]["evaluation"]["before_training"] = False
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cmd(config: Path, out: Path, every: int) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "bench_real.py"), "--config", str(config), "--out", str(out),
            "run", "--no-warm", "--only", "grpo", "--seeds", "0", "--budget", str(BUDGET), "--eval-every-rollouts", "64",
            "--eval-prompts", "val", "--jobs", "1", "--checkpoint-every", str(every)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _result(out: Path) -> dict:
    res = json.loads((out / "results" / "grpo_seed0.json").read_text())
    for key in ("wall_seconds", "resumed_at_step", "cpu_seconds", "load_start", "load_end"):  # times and load
        res.pop(key, None)
    for e in res["evals"]:
        e.pop("train_seconds")
        e.pop("train_cpu_seconds")  # recorded in every evaluation (cpu_clock.CpuClock)
    return res


def _trained(out: Path) -> int:
    """Training rows in the cell's metrics.csv so far."""
    import csv

    found = list((out / "grpo_seed0").glob("csv/version_*/metrics.csv"))
    try:
        return sum(1 for r in csv.DictReader(found[0].open()) if r.get("rollouts/generated")) if found else 0
    except (OSError, csv.Error):  # being replaced
        return 0


def _files(out: Path) -> tuple[str, str]:
    return ((out / "results" / "grpo_seed0.groups.csv").read_text(),
            (out / "results" / "grpo_seed0.selection.csv").read_text())


@pytest.mark.integration
def test_a_killed_cell_resumes_and_writes_what_a_straight_run_writes(tmp_path):
    config = _config(tmp_path)
    plain, straight, killed = tmp_path / "plain", tmp_path / "straight", tmp_path / "killed"
    for out, every in ((plain, 0), (straight, 2)):
        done = subprocess.run(_cmd(config, out, every), cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _result(straight) == _result(plain) and _files(straight) == _files(plain)  # checkpoints change nothing
    assert not list((plain / "grpo_seed0").rglob("*.ckpt"))

    # kill -9 of the benchmark and its worker once the first checkpoint (after 2 steps) is on disk and the
    # third step's row too: the resumed run runs that step again, and its old rows must go
    proc = subprocess.Popen(_cmd(config, killed, 2), cwd=tmp_path, env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (list((killed / "grpo_seed0").glob("csv/version_*/checkpoints/last.ckpt")) and _trained(killed) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, "the cell ended before its first checkpoint"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "results" / "grpo_seed0.json").exists()

    again = subprocess.run(_cmd(config, killed, 2), cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "grpo_seed0: resuming from" in again.stdout
    assert json.loads((killed / "results" / "grpo_seed0.json").read_text())["resumed_at_step"] >= 2
    assert _result(killed) == _result(straight)
    assert _files(killed) == _files(straight)


def test_a_folder_of_other_arguments_is_not_resumed(tmp_path):
    bench = load_benchmark("bench_real")
    rd = tmp_path / "grpo_seed0"
    (rd / "csv" / "version_0" / "checkpoints").mkdir(parents=True)
    (rd / "csv" / "version_0" / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (rd / "budget.yaml").write_text("a: 1\n")
    (rd / "fit_args.json").write_text(json.dumps(["fit", "--seed_everything", "0"]))
    assert bench.resumable_checkpoint(rd, "a: 1\n", ["fit", "--seed_everything", "0"]) == rd / "csv/version_0/checkpoints/last.ckpt"
    assert bench.resumable_checkpoint(rd, "a: 2\n", ["fit", "--seed_everything", "0"]) is None  # other callbacks or budget
    assert bench.resumable_checkpoint(rd, "a: 1\n", ["fit", "--seed_everything", "1"]) is None  # other arguments
    (rd / "csv" / "version_0" / "checkpoints" / "last.ckpt").unlink()
    assert bench.resumable_checkpoint(rd, "a: 1\n", ["fit", "--seed_everything", "0"]) is None  # nothing to resume from


def test_a_step_file_newer_than_last_ckpt_is_the_one_resumed(tmp_path):
    """A kill while last.ckpt was being copied leaves the step's own file newer: resuming from last.ckpt would be
    refused (lit_rlvr.run.resumes), so the bench resumes from the newest."""
    import torch

    bench = load_benchmark("bench_real")
    rd = tmp_path / "grpo_seed0"
    ckpts = rd / "csv" / "version_0" / "checkpoints"
    ckpts.mkdir(parents=True)
    (rd / "budget.yaml").write_text("a: 1\n")
    (rd / "fit_args.json").write_text(json.dumps(["fit"]))
    torch.save({"global_step": 4}, ckpts / "last.ckpt")
    torch.save({"global_step": 2}, ckpts / "step=2.ckpt")
    assert bench.resumable_checkpoint(rd, "a: 1\n", ["fit"]) == ckpts / "last.ckpt"
    torch.save({"global_step": 6}, ckpts / "step=6.ckpt")
    assert bench.resumable_checkpoint(rd, "a: 1\n", ["fit"]) == ckpts / "step=6.ckpt"


def test_a_resumed_run_missing_a_steps_row_is_caught():
    import pandas as pd

    bench = load_benchmark("bench_real")
    nan = float("nan")
    frame = pd.DataFrame({"step": [0, 0, 2, 3, 3], "rollouts/generated": [nan, 16, 16, nan, 16]})  # step 1: no row
    assert bench.missing_training_steps(frame) == [1]
    assert bench.missing_training_steps(frame[frame["step"] != 2].assign(step=[0, 0, 1, 1])) == []
