"""AdaptiveBatch in real fits of the tiny model (``-m integration``): the batch changes in metrics.csv, the
normaliser and beta2 follow it, a kill -9 resume across a change is exact, and two DDP ranks (gloo) agree.

The fits start at 2 prompts and, rewarded by a fair coin per completion (no signal: the noise dominates), grow by
1.5x a step once two steps with two informative groups have shown it. Nothing is timed (the default), so two runs
and a resume decide the same. (Before the noise scale's |G|^2 was set to 0 exactly for steps with fewer than two
informative groups, these fits grew on float roundoff of that 0.)
"""

import csv
import glob
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_rlvr.critical_batch.batch_rule import beta2_for
from tests.assertions import assert_same

ROOT = Path(__file__).resolve().parents[2]
G = 4  # configs/tiny.yaml's num_generations
COMMON = [
    "--config", str(ROOT / "configs" / "tiny.yaml"), "--config", str(ROOT / "configs" / "methods" / "adaptive_batch.yaml"),
    "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:coin_reward",
    "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false", "--model.rollout.max_new_tokens=4",
    "--trainer.callbacks.init_args.min_estimates=2", "--trainer.callbacks.init_args.max_prompts=8",
    "--trainer.default_root_dir=run",
]
RECORDER = ["--trainer.callbacks+=tests.adaptive_helpers.RecordBatches"]  # after the controller's own init_args
FIXED_COSTS = ["--trainer.callbacks.init_args.fixed_cost_rollouts=1000", "--trainer.callbacks.init_args.z=0"]
KEYS = ["train/loss", "reward/mean", "rollouts/generated", "tokens/generated", "batch/prompts", "batch/beta2", "batch/share",
        "batch/target", "noise/B_simple_informative", "cumulative/rollouts_generated"]


def _fit(workdir: Path, *extra: str, callbacks: tuple[str, ...] = (), expect: int = 0) -> Path:
    """A fit of the tiny config with the controller (``extra``: its init_args and trainer flags; ``callbacks``: more, appended)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", *COMMON, *extra, *RECORDER, *callbacks]
    # a session of its own: a kill -9 or a hung rank takes nothing else with it
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
    assert done.returncode == expect, done.stderr[-4000:]
    (workdir / "stdout.txt").write_text(done.stdout)
    return workdir


def _rows(workdir: Path) -> list[dict[str, float]]:
    rows = []
    for path in sorted(glob.glob(str(workdir / "run" / "csv" / "version_*" / "metrics.csv"))):
        with open(path) as f:
            rows += [{k: float(r[k]) for k in KEYS} for r in csv.DictReader(f) if r.get("rollouts/generated")]
    return rows


def _dump(workdir: Path, rank: int = 0) -> dict:
    return torch.load(workdir / "batch_dump" / f"batches_rank{rank}.pt", weights_only=False)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    return _fit(tmp_path_factory.mktemp("adaptive_straight"), *FIXED_COSTS, "--trainer.max_steps=6")


@pytest.mark.integration
def test_a_tiny_fit_changes_its_batch_and_everything_follows(straight):
    rows, dump = _rows(straight), _dump(straight)
    prompts = [int(r["batch/prompts"]) for r in rows]
    assert len(rows) == 6 and prompts[:2] == [2, 2], prompts  # it starts small; no decision before 2 estimates
    assert prompts == sorted(prompts) and all(b / a <= 1.5 for a, b in zip(prompts, prompts[1:])), prompts
    assert len(set(prompts)) >= 2, f"the batch never changed: {prompts}"
    assert all(2 <= p <= 8 for p in prompts)
    for step, (p, r) in enumerate(zip(prompts, rows)):
        assert r["rollouts/generated"] == p * G, step  # every prompt of the batch rolled out
        assert dump["pools"][step][0] == p and len(dump["pools"][step][1]) == p  # pool_multiple 1: pool = batch
        # the loss normaliser is the step's own kept rows and tokens, whatever the batch
        n = dump["norms"][step]
        assert n["num_sequences"] == n["rows"] == p * G and n["num_tokens"] == n["tokens"] and n["groups"] == p, step
        # beta2 as this step used it keeps the half-life in samples of the configured 0.99 at 4 prompts
        assert r["batch/beta2"] == pytest.approx(beta2_for(0.99, 4, p), rel=1e-6), step
    assert dump["betas"][0][1] == pytest.approx(beta2_for(0.99, 4, prompts[-1]))  # the last step's own batch
    assert dump["state"]["prompts"] >= prompts[-1]  # decided a pool ahead: the next pool's batch
    seen = [i for _, ids in (dump["pools"][s] for s in range(6)) for i in ids]
    assert len(seen) == len(set(seen)), "a prompt came twice within the first epoch"  # 64 prompts, fewer served
    assert "batch controller      ended at" in (straight / "stdout.txt").read_text()


@pytest.mark.integration
def test_a_kill_9_resume_across_a_change_is_exact(straight, tmp_path):
    """kill -9 as step 3 starts; resume from last.ckpt (step 2's, saved after the first change was decided):
    the same pools, batches, beta2 and metrics as the straight run, and the same controller state at the end."""
    kill = ["--trainer.callbacks+=tests.fit_callbacks.SignalAtStep", "--trainer.callbacks.step=3", f"--trainer.callbacks.signum={int(signal.SIGKILL)}"]
    first = _fit(tmp_path / "first", *FIXED_COSTS, "--trainer.max_steps=6", callbacks=tuple(kill), expect=-signal.SIGKILL)
    (ckpt,) = glob.glob(str(first / "run" / "**" / "last.ckpt"), recursive=True)
    assert torch.load(ckpt, weights_only=False)["global_step"] == 2
    resumed = _fit(tmp_path / "resumed", *FIXED_COSTS, "--trainer.max_steps=6", f"--ckpt_path={ckpt}")
    want, got = _rows(straight)[2:], _rows(resumed)
    assert len(got) == 4
    assert len({r["batch/prompts"] for r in want}) >= 2, "no change after the checkpoint"
    for key in KEYS:
        assert [r[key] for r in got] == [r[key] for r in want] or all(
            (a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip((r[key] for r in got), (r[key] for r in want))), key
    a, b = _dump(straight), _dump(resumed)
    for step in range(2, 6):
        assert b["pools"][step] == a["pools"][step], f"step {step} trained on other prompts"
    assert_same(a["state"], b["state"])
    assert a["betas"] == b["betas"] and a["changes"] == b["changes"]


@pytest.mark.integration
def test_a_fit_run_twice_gives_identical_metrics(straight, tmp_path):
    """Every column of metrics.csv but the times, and the controller's state, the same in a second run."""
    again = _fit(tmp_path / "again", *FIXED_COSTS, "--trainer.max_steps=6")

    def table(workdir: Path) -> list[dict[str, str]]:
        (path,) = glob.glob(str(workdir / "run" / "csv" / "version_*" / "metrics.csv"))
        with open(path) as f:
            return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(f)]

    assert table(again) == table(straight)
    assert_same(_dump(again)["state"], _dump(straight)["state"])


@pytest.mark.integration
def test_two_ddp_ranks_agree_on_a_batch_divisible_by_two(tmp_path):
    """Measured costs (opt-in; each rank times its own half): rank 0 decides and broadcasts; both ranks hold the
    same state. Two ranks need max_change 2 to move from 2 prompts (one more per rank)."""
    run = _fit(tmp_path, "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=5",
               "--trainer.callbacks.init_args.measure_costs=true", "--trainer.callbacks.init_args.max_change=2",
               "--trainer.callbacks.init_args.z=0", "--trainer.callbacks.init_args.interval=noise",  # every step counts
               "--trainer.callbacks.init_args.multiple=100")  # aim far above the noise scale: the batch grows
    d0, d1 = _dump(run, 0), _dump(run, 1)
    assert_same(d0["state"], d1["state"])
    assert d0["pools"] == d1["pools"] and d0["betas"] == d1["betas"] and d0["changes"] == d1["changes"]
    sizes = [d0["pools"][s][0] for s in range(5)]
    assert all(b % 2 == 0 for b in sizes) and len(set(sizes)) >= 2, sizes
    assert d0["state"]["cost_count"] == 5 and d0["state"]["fixed_ema"] > 0  # measured, and shared from rank 0
    rows = _rows(run)
    assert [int(r["batch/prompts"]) for r in rows] == sizes
    assert [r["rollouts/generated"] for r in rows] == [b // 2 * G for b in sizes]  # this rank's half


# ------------------------------------------------------------------ the group-size knob

KNOB = ["--trainer.callbacks.init_args.min_group_size=2", "--trainer.callbacks.init_args.max_group_size=8",
        "--model.noise_scale.split_groups=true"]


def _knob_rows(workdir: Path) -> list[dict[str, float]]:
    rows = []
    for path in sorted(glob.glob(str(workdir / "run" / "csv" / "version_*" / "metrics.csv"))):
        with open(path) as f:
            rows += [{k: float(r[k]) for k in KEYS + ["batch/group_size"]} for r in csv.DictReader(f) if r.get("rollouts/generated")]
    return rows


REGROUP = ("--trainer.callbacks+=tests.adaptive_helpers.Regroup", "--trainer.callbacks.step=1",
           "--trainer.callbacks.group_size=8")


@pytest.fixture(scope="module")
def regrouped(tmp_path_factory) -> Path:
    """The G knob on, and G changed from 4 to 8 at pool 3 as the controller would (its own rule holds G here: with a
    coin for a reward the window is noise-dominated; tests/callbacks/test_adaptive_batch.py has its decisions)."""
    return _fit(tmp_path_factory.mktemp("adaptive_regrouped"), *FIXED_COSTS, *KNOB, "--trainer.max_steps=6", callbacks=REGROUP)


@pytest.mark.integration
def test_a_g_change_mid_fit_keeps_rollouts_advantages_and_records_right(regrouped):
    rows, dump = _knob_rows(regrouped), _dump(regrouped)
    groups = [int(r["batch/group_size"]) for r in rows]
    assert groups[0] == G and len(set(groups)) >= 2, f"G never changed: {groups}"
    (records,) = glob.glob(str(regrouped / "run" / "csv" / "version_*" / "groups.csv"))
    with open(records) as f:
        recorded = [(int(r["step"]), int(r["n"])) for r in csv.DictReader(f)]
    for step, (r, g) in enumerate(zip(rows, groups)):
        p = int(r["batch/prompts"])
        assert dump["groups"][step] == g, step  # the step's hooks read G from the pool's context
        assert r["rollouts/generated"] == p * g, step  # every prompt rolled out G times
        n = dump["norms"][step]
        assert n["rows"] == p * g and n["groups"] == p and n["rows_per_group"] == [g] * p, step
        assert n["max_mean_advantage"] < 1e-5, step  # group-relative advantages within each group of G
        assert {size for s, size in recorded if s == step} == {g}, step  # groups.csv: n = this step's G
        # beta2 keeps its half-life in samples: P·G a step against the configured 4 prompts x G 4
        assert r["batch/beta2"] == pytest.approx(beta2_for(0.99, 4 * G, p * g), rel=1e-6), step
    assert dump["group_changes"] == [(3, 8)]


@pytest.mark.integration
def test_a_kill_9_resume_across_a_g_change_is_exact_and_a_repeat_is_identical(regrouped, tmp_path):
    kill = ["--trainer.callbacks+=tests.fit_callbacks.SignalAtStep", "--trainer.callbacks.step=3", f"--trainer.callbacks.signum={int(signal.SIGKILL)}"]
    first = _fit(tmp_path / "first", *FIXED_COSTS, *KNOB, "--trainer.max_steps=6", callbacks=REGROUP + tuple(kill), expect=-signal.SIGKILL)
    (ckpt,) = glob.glob(str(first / "run" / "**" / "last.ckpt"), recursive=True)
    resumed = _fit(tmp_path / "resumed", *FIXED_COSTS, *KNOB, "--trainer.max_steps=6", f"--ckpt_path={ckpt}", callbacks=REGROUP)
    want, got = _knob_rows(regrouped)[2:], _knob_rows(resumed)
    assert len({r["batch/group_size"] for r in want}) >= 2 or want[0]["batch/group_size"] != G, "no G change after the checkpoint"
    for key in KEYS + ["batch/group_size"]:
        assert all((a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip((r[key] for r in got), (r[key] for r in want))), key
    a, b = _dump(regrouped), _dump(resumed)
    assert [b["pools"][s] for s in range(2, 6)] == [a["pools"][s] for s in range(2, 6)]
    assert_same(a["state"], b["state"])
    assert a["group_changes"] == b["group_changes"] and a["betas"] == b["betas"]
    again = _fit(tmp_path / "again", *FIXED_COSTS, *KNOB, "--trainer.max_steps=6", callbacks=REGROUP)
    assert _knob_rows(again) == _knob_rows(regrouped) or all(
        all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(r.values(), q.values()))
        for r, q in zip(_knob_rows(again), _knob_rows(regrouped)))
    assert_same(_dump(again)["state"], a["state"])
