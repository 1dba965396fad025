"""``lit-rlvr calibrate``: the least-squares cost line, and a real run on the tiny config."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lit_rlvr.critical_batch.calibrate import fit_costs

ROOT = Path(__file__).resolve().parents[2]


def test_the_line_through_the_steps_gives_the_fixed_cost_in_rollouts():
    # 0.45 s fixed + 0.23 s a rollout, measured at 16 and 64 rollouts with +-0.01 s of noise that cancels
    points = [(16.0, 0.45 + 0.23 * 16 + 0.01), (16.0, 0.45 + 0.23 * 16 - 0.01), (64.0, 0.45 + 0.23 * 64)]
    cal = fit_costs(points)
    assert cal.fixed_s == pytest.approx(0.45) and cal.per_rollout_s == pytest.approx(0.23)
    assert cal.fixed_cost_rollouts == pytest.approx(0.45 / 0.23) and cal.steps == 3
    assert 0 < cal.fixed_cost_rollouts_se < 0.5  # +-0.01 s of noise on 4-15 s steps: a tight line
    wide = fit_costs([(16.0, 3.0), (16.0, 4.5), (64.0, 12.0), (64.0, 13.5)])
    assert wide.fixed_cost_rollouts_se > fit_costs([(16.0, 3.7), (16.0, 3.8), (64.0, 12.7), (64.0, 12.8)]).fixed_cost_rollouts_se
    assert fit_costs([(8.0, 1.0), (32.0, 2.0)]).fixed_cost_rollouts == pytest.approx(0.6667 / (1 / 24), rel=1e-3)
    assert fit_costs([(8.0, 1.0), (32.0, 4.0)]).fixed_cost_rollouts == 0.0  # a negative intercept: no fixed cost
    assert math.isnan(fit_costs([(8.0, 2.0), (32.0, 1.0)]).fixed_cost_rollouts)  # cost falling with rollouts: no answer
    with pytest.raises(ValueError, match="two or more different rollout counts"):
        fit_costs([(8.0, 1.0), (8.0, 1.1)])


@pytest.mark.integration  # two short fits of the tiny model in subprocesses
def test_calibrate_runs_the_config_at_two_batches_and_prints_the_line(tmp_path):
    cmd = [sys.executable, "-m", "lit_rlvr.critical_batch.calibrate", "--config", str(ROOT / "configs" / "tiny.yaml"),
           "--prompts", "2", "4", "--steps", "3", "--", "--model.rollout.max_new_tokens=4"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    lines = done.stdout.splitlines()
    measured = [ln for ln in lines if "CPU s" in ln and "prompts" in ln and "rollouts" in ln]
    assert len(measured) == 4, done.stderr[-3000:]  # 2 steps kept of 3, at each batch
    assert {ln.split()[2] for ln in measured} == {"8", "16"}  # tiny's G = 4: 2 and 4 prompts
    if done.returncode == 1:  # on a loaded machine the tiny model's steps may not cost more with more rollouts
        assert "did not rise with its rollouts" in done.stderr and "fixed_cost_rollouts:" not in done.stdout
        return
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [ln for ln in lines if ln.strip().startswith("fixed_cost_rollouts:")]
    phi = float(line.split(":")[1])
    assert phi >= 0 and math.isfinite(phi)
    assert f"--trainer.callbacks.init_args.fixed_cost_rollouts={phi:.1f}" in done.stdout


def test_a_line_that_does_not_rise_is_refused_not_printed_as_nan(monkeypatch, capsys):
    """When a step's CPU seconds fall with its rollouts (a loaded machine), calibrate says why and exits 1 instead of
    telling the user to set fixed_cost_rollouts to nan (which AdaptiveBatch refuses)."""
    from lit_rlvr.critical_batch import calibrate

    fake = {2: [(16.0, 4.0), (16.0, 4.2)], 8: [(64.0, 3.0), (64.0, 3.1)]}  # more rollouts, fewer CPU seconds
    monkeypatch.setattr(calibrate, "measure", lambda configs, p, steps, extra, workdir: fake[p])
    assert calibrate.main(["--config", "x.yaml"]) == 1
    out, err = capsys.readouterr()
    assert "did not rise with its rollouts" in err and "fixed_cost_rollouts:" not in out and "nan" not in out
