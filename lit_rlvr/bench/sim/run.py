"""``simulate``: one strategy through ``GRPOModule.training_step`` with the simulated policy.

``simulate`` calls every callback's ``on_train_batch_start`` in list order before ``training_step``,
as Lightning does, and ``module.on_fit_start()`` once (the module's own composition checks and every
selector's ``setup_selection``). ``time/selection_ms`` is wall time inside the selector hooks only
(``on_train_batch_start``, ``plan``, ``prune``, ``on_rollouts_scored``, ``select_rollouts``,
``token_weights``), minus time spent in ``PromptDataModule.draw`` called from within them (data, not
selection). The fake engine, the reward and the accounting are excluded.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import yaml

from lit_rlvr.bench.sim.config import SimConfig
from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.bench.sim.standins import SimModule, SimSource, SimTrainer
from lit_rlvr.bench.sim.strategies import StrategySpec, strategy_spec
from lit_rlvr.bench.timing import Stopwatch, instrument
from lit_rlvr.data.datamodule import PromptDataModule

__all__ = ["SimResult", "simulate", "write_metrics_csv"]


@dataclass
class SimResult:
    """One simulated run: its per-step log rows (trainer column names) and where they were written."""

    strategy: str
    seed: int
    rows: list[dict[str, float]]
    wall_seconds: float
    metrics_path: Optional[str] = None
    selection_path: Optional[str] = None

    def column(self, name: str) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in self.rows], dtype=np.float64)


def simulate(
    strategy: str | StrategySpec,
    seed: int,
    cfg: SimConfig,
    out_dir: Optional[str | Path] = None,
    record_selection: bool = False,
    configs_dir: Optional[str | Path] = None,
    observers: Sequence[Any] = (),
) -> SimResult:
    """Run one strategy through ``GRPOModule.training_step`` with the simulated policy.

    The run stops after ``cfg.steps`` steps or once ``cfg.max_rollouts`` rollouts were generated.

    With ``out_dir``, writes ``<out_dir>/<strategy>/seed<seed>/csv/version_0/metrics.csv`` (and
    ``selection.csv`` there with ``record_selection``), the layout of a CSVLogger run.
    ``observers``: callbacks that only read (e.g. per-part pass rates), placed after the selectors.
    """
    from lit_rlvr.bench.recorder import SelectionRecorder

    t_start = time.perf_counter()
    spec = strategy if isinstance(strategy, StrategySpec) else strategy_spec(strategy, configs_dir)
    group_size = spec.group_size or cfg.group_size
    sim = SimPolicy(cfg, seed)
    dm = PromptDataModule(SimSource(cfg.num_prompts), batch_size=cfg.batch_size, pool_multiple=spec.pool_multiple, seed=seed)
    dm.setup()
    module = SimModule(sim, group_size, seed)
    selectors = spec.build(sim, group_size)
    callbacks: list[Any] = list(selectors) + list(observers)
    run_dir = None
    if out_dir is not None:
        run_dir = Path(out_dir) / spec.name / f"seed{seed}" / "csv" / "version_0"
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("metrics.csv", "selection.csv"):
            if (run_dir / stale).exists():
                (run_dir / stale).unlink()
    recorder = None
    if record_selection:
        path = str(run_dir / "selection.csv") if run_dir is not None else None
        recorder = SelectionRecorder(path=path)
        callbacks.append(recorder)  # last: it reads pool.keep after every selector ran
    trainer = SimTrainer(callbacks=callbacks, datamodule=dm, log_dir=str(run_dir) if run_dir else None)
    module.trainer = trainer
    watch = Stopwatch()
    instrument(selectors + [module._default_allocator], dm, watch)
    module.on_fit_start()  # the module's own composition checks and setup_selection

    rows: list[dict[str, float]] = [
        {
            "step": 0.0,
            "val/pass@1": sim.accuracy(),
            "cumulative/rollouts_generated": 0.0,
            "cumulative/rollouts_effective": 0.0,
            "cumulative/rollouts_in_gradient": 0.0,
            "sim/skill": sim.skill,
            **{f"val/pass@1/{part}": acc for part, acc in sim.part_accuracy().items()},
        }
    ]
    for i in range(cfg.steps):
        step = module.steps_done
        sim.step = step
        pool = module.on_before_batch_transfer(dm.pool(step), 0)  # the step's context, as Lightning attaches it
        watch.reset()
        for cb in callbacks:  # Lightning's on_train_batch_start, every callback in list order
            cb.on_train_batch_start(trainer, module, pool, i)
        module.training_step(pool, i)
        row = {"step": float(module.steps_done), "epoch": float(dm.epoch_of(step)), **module.logged}
        row["time/selection_ms"] = watch.selection_ms
        row["sim/skill"] = sim.skill
        row["sim/skill_gain"] = module.last_gain
        done = i == cfg.steps - 1 or (cfg.max_rollouts and module.totals.rollouts_generated >= cfg.max_rollouts)
        if cfg.eval_every and (module.steps_done % cfg.eval_every == 0 or done):
            row["val/pass@1"] = sim.accuracy()
            row.update({f"val/pass@1/{part}": acc for part, acc in sim.part_accuracy().items()})
        rows.append(row)
        if done:
            break
    if recorder is not None:
        recorder.on_train_end(trainer, module)

    result = SimResult(spec.name, int(seed), rows, time.perf_counter() - t_start)
    if run_dir is not None:
        result.metrics_path = str(run_dir / "metrics.csv")
        write_metrics_csv(rows, result.metrics_path)
        with open(run_dir / "sim_config.yaml", "w") as f:
            yaml.safe_dump(
                {"strategy": spec.name, "source": spec.source, "seed": int(seed), "pool_multiple": spec.pool_multiple,
                 "group_size": group_size, "sim": asdict(cfg), "wall_seconds": round(result.wall_seconds, 2)},
                f,
                sort_keys=False,
            )
        if recorder is not None:
            result.selection_path = str(run_dir / "selection.csv")
    return result


def write_metrics_csv(rows: list[dict[str, float]], path: str | Path) -> None:
    """Rows as a CSVLogger-style metrics.csv: ``step`` first, then every column seen (sorted); blanks for missing."""
    keys: set[str] = set()
    for r in rows:
        keys.update(r)
    columns = ["step"] + sorted(k for k in keys if k != "step")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        for r in rows:
            w.writerow({k: (int(v) if k == "step" else _fmt(v)) for k, v in r.items()})


def _fmt(v: float) -> Any:
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return int(v)
    return v
