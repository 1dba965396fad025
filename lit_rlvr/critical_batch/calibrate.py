"""``lit-rlvr calibrate``: what a step costs besides its rollouts, in rollouts, measured on this machine.

The batch controller (``AdaptiveBatch``) weighs a step's fixed cost (optimizer step, weight sync, logging,
the noise-scale bookkeeping) against its rollouts' cost; it decides from that ratio, φ =
``fixed_cost_rollouts``, never from the clock during a fit, so a fit and its resume decide the same. This
command measures φ once: it runs the user's config for a few steps at two prompt batches (default 2 and 8),
each in a fresh process with ``CpuClock`` (CPU seconds, user + system, of the fit and its reward workers,
per step), drops each fit's first step (caches, lazy imports), fits ``cpu_s = c_fixed + c_roll · rollouts``
by least squares over the rest, and prints φ = c_fixed / c_roll and the config line. CPU seconds, not wall
seconds: they hold on a loaded machine. Pass the config without ``AdaptiveBatch`` (it would set the batch).

    lit-rlvr calibrate --config configs/quickstart.yaml
"""

from __future__ import annotations

import argparse
import csv
import glob
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["Calibration", "fit_costs", "main"]

CPU_CLOCK = "lit_rlvr.critical_batch.cpu_clock.CpuClock"


@dataclass(frozen=True)
class Calibration:
    """A least-squares line through (rollouts, CPU seconds) of the measured steps."""

    fixed_s: float
    """c_fixed: CPU seconds of a step besides its rollouts."""
    per_rollout_s: float
    """c_roll: CPU seconds per rollout."""
    steps: int
    """Steps the line was fitted to."""
    fixed_cost_rollouts_se: float = float("nan")
    """The standard error of φ (delta method over the line's residuals; NaN with fewer than 3 steps)."""

    @property
    def fixed_cost_rollouts(self) -> float:
        """φ = c_fixed / c_roll: a step's fixed cost in rollouts (never below 0)."""
        return max(self.fixed_s, 0.0) / self.per_rollout_s if self.per_rollout_s > 0 else float("nan")


def fit_costs(points: Sequence[tuple[float, float]]) -> Calibration:
    """Ordinary least squares of CPU seconds on rollouts over ``points`` [(rollouts, seconds)]; ``ValueError``
    unless at least two distinct rollout counts were measured."""
    n = len(points)
    xs = [x for x, _ in points]
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("calibrate: steps at two or more different rollout counts are needed (--prompts A B)")
    mx, my = sum(xs) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    intercept = my - slope * mx
    se = float("nan")
    if n > 2 and slope > 0 and intercept > 0:
        s2 = sum((y - intercept - slope * x) ** 2 for x, y in points) / (n - 2)  # residual variance
        var_a, var_b, cov = s2 * (1 / n + mx * mx / sxx), s2 / sxx, -mx * s2 / sxx
        phi = intercept / slope
        se = phi * math.sqrt(max(var_a / intercept**2 + var_b / slope**2 - 2 * cov / (intercept * slope), 0.0))
    return Calibration(fixed_s=intercept, per_rollout_s=slope, steps=n, fixed_cost_rollouts_se=se)


def _steps(run_dir: str) -> list[tuple[float, float]]:
    """(rollouts generated, CPU seconds) of each training step in ``run_dir``'s metrics.csv, the first dropped."""
    (path,) = glob.glob(os.path.join(run_dir, "**", "metrics.csv"), recursive=True) or [None]
    if path is None:
        raise RuntimeError(f"calibrate: the fit wrote no metrics.csv under {run_dir}")
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("time/cpu_s") and r.get("rollouts/generated")]
    return [(float(r["rollouts/generated"]), float(r["time/cpu_s"])) for r in rows[1:]]


def measure(configs: Sequence[str], prompts: int, steps: int, extra: Sequence[str], workdir: str) -> list[tuple[float, float]]:
    """Run the configs for ``steps`` steps at ``prompts`` per step in a fresh process; its steps (rollouts, CPU s)."""
    run_dir = os.path.join(workdir, f"prompts{prompts}")
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", *[a for c in configs for a in ("--config", c)],
           f"--data.batch_size={prompts}", f"--trainer.max_steps={steps}", "--trainer.limit_val_batches=0",
           "--trainer.enable_checkpointing=false", "--model.evaluation.before_training=false",
           f"--trainer.default_root_dir={run_dir}",
           f"--trainer.callbacks+={CPU_CLOCK}", *extra]
    print(f"calibrate: {steps} steps at {prompts} prompts ...", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"calibrate: the fit at {prompts} prompts failed (exit {done.returncode}):\n{tail}")
    return _steps(run_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="lit-rlvr calibrate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", required=True, help="a config file (repeat for several)")
    parser.add_argument("--prompts", type=int, nargs="+", default=[2, 8], help="prompt batches to measure (default 2 8)")
    parser.add_argument("--steps", type=int, default=4, help="steps per batch; the first of each is dropped (default 4)")
    parser.add_argument("extra", nargs="*", help="more flags for the fits, after --, e.g. -- --seed_everything=1")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of each fit is dropped)")
    points: list[tuple[float, float]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="lit-rlvr-calibrate-") as workdir:
            for p in args.prompts:
                got = measure(args.config, p, args.steps, args.extra, workdir)
                for rollouts, cpu in got:
                    print(f"  {p:>4} prompts  {rollouts:>6.0f} rollouts  {cpu:8.2f} CPU s", flush=True)
                points += got
        cal = fit_costs(points)
    except (RuntimeError, ValueError) as e:
        print(str(e), file=sys.stderr)
        return 1
    phi = cal.fixed_cost_rollouts
    if not math.isfinite(phi):  # more rollouts cost no more: the load (or the noise of short steps) hid the line
        print(f"calibrate: a step's CPU seconds did not rise with its rollouts ({cal.fixed_s:.2f} CPU s fixed, "
              f"{cal.per_rollout_s:.3f} per rollout over {cal.steps} steps), so no fixed cost can be read off. "
              f"Run it again on an idle machine, with more --steps, or with batches further apart "
              f"(--prompts 2 16); until then keep fixed_cost_rollouts at its default", file=sys.stderr)
        return 1
    print(f"a step: {cal.fixed_s:.2f} CPU s fixed + {cal.per_rollout_s:.3f} CPU s per rollout "
          f"({cal.steps} steps): its fixed cost is {phi:.1f} ± {cal.fixed_cost_rollouts_se:.1f} rollouts "
          f"(standard error; more --steps narrow it)")
    print("put this in the AdaptiveBatch config (configs/methods/adaptive_batch.yaml's init_args):")
    print(f"  fixed_cost_rollouts: {phi:.1f}")
    print(f"or on the command line: --trainer.callbacks.init_args.fixed_cost_rollouts={phi:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
