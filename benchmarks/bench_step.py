"""Benchmark: where one quick-start step's time goes, the old update path against the new (not a test).

The quick-start run (configs/quickstart.yaml: SmolLM2-135M-Instruct + LoRA r=16 on all linear
layers, 8 prompts x G = 8, <= 12 new tokens, one micro-batch of 32 rows at a time, fp32 on CPU)
is trained in one process, and its steps alternate between three update paths in mirrored order,
so that drift in a shared machine's load hits every path alike (``PATHS``, ``ORDER``):

* old: ``skip_zero_advantage=False``: every kept row runs forward/backward, every row's prompt
  recomputed (as before the row skipping, except that each micro-batch is trimmed to its own padding);
* skip: the default: rows whose advantage is 0 on every loss token are left out;
* skip+prefix: and ``share_prompt_prefix=True``: each micro-batch's distinct prompts run once.

Two phases of the same run:

* early: the quick-start as configured (the base model's own rewards);
* late: after scoring, a callback marks every group but the step's first as solved (reward 1
  for all its rollouts), so 7 of 8 groups are zero-variance, as late in the quick-start run.

Each phase starts with one untimed warm-up step. Per step it records the wall time
(``on_train_batch_start`` -> ``on_train_batch_end``), the module's ``time/rollout_s``
(generation), ``time/reward_s`` and ``time/update_s`` (plan, forward/backward, optimizer);
"other" is the rest (collation, advantages, logging). It also measures:

* the machine's sustained fp32 GEMM rate (``--gemm-n`` square matmuls for ``--gemm-seconds``),
  before and after the training steps;
* the update's FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over the forward and
  backward of the last batch of each phase, on each path's plan; achieved GFLOP/s =
  (FLOPs per padded token of that count x the step's ``train/tokens_in_update``) / update seconds;
* what the prompt tokens cost: forward/backward of full rows against completions alone plus
  each group's prompt once (what prefix reuse would compute), alternating.

With ``--profile`` it instead runs one warm-up step and a cProfile'd step and prints the top
functions. Usage::

    OMP_NUM_THREADS=2 python benchmarks/bench_step.py --steps 6 --json-out runs/bench_step.json
    OMP_NUM_THREADS=2 python benchmarks/bench_step.py --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from typing import Any, Optional

import lightning.pytorch as pl
import torch

from lit_rlvr.selection import SelectionCallback
from lit_rlvr.collate import TrainingTensors, collate_rollouts, policy_logprobs
from lit_rlvr.data import PromptDataModule, ReasoningGymSource
from lit_rlvr.losses import token_logprobs
from lit_rlvr.module import GRPOModule, LossSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.policy import LoraSettings, PolicyConfig
from lit_rlvr.rewards import ReasoningGymReward
from lit_rlvr.types import RolloutBatch
from lit_rlvr.update import Updater, plan_update

PATHS = {  # name -> (skip_zero_advantage, share_prompt_prefix)
    "old": (False, False),  # every kept row, every row's prompt (the update before row skipping and prompt sharing)
    "skip": (True, False),  # rows with advantage 0 left out
    "skip+prefix": (True, True),  # and each micro-batch's distinct prompts computed once
}
ORDER = ("old", "skip", "skip+prefix", "skip+prefix", "skip", "old")  # mirrored: drift hits every path alike


def apply_path(module: GRPOModule, path: str) -> None:
    module.loss_settings.skip_zero_advantage, module.loss_settings.share_prompt_prefix = PATHS[path]


# --------------------------------------------------------------------------- the quick-start, in code


def quickstart_module(policy: str = "smollm2-135m-instruct") -> "BenchModule":
    """configs/quickstart.yaml's model section (no export, no checkpoints); ``policy="tiny"`` for a smoke run."""
    return BenchModule(
        policy=PolicyConfig(name_or_path=policy, lora=LoraSettings(r=16, alpha=32, target_modules="all-linear")),
        rollout=RolloutSettings(num_generations=8, max_new_tokens=12, temperature=1.0),
        loss=LossSettings(micro_batch_size=32),
        optimizer=OptimizerSettings(lr=3e-4, warmup_steps=2),
        rewards=[ReasoningGymReward(extraction="last_number")],
        checkpoint_every_n_steps=None,
    )


def quickstart_data() -> PromptDataModule:
    """configs/quickstart.yaml's data section."""
    task_config = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"],
                   "allow_parentheses": False, "allow_negation": False}
    source = ReasoningGymSource(tasks="basic_arithmetic", task_config=task_config, train_size=1000, val_size=64)
    return PromptDataModule(source, batch_size=8, val_batch_size=64, system_prompt="Answer with a single number.")


class PathSwitchingUpdater(Updater):
    """The module's own update, on the path the schedule names for this step; keeps each phase's last batch."""

    def __init__(self, module: "BenchModule") -> None:
        super().__init__(module, loss=module.loss_settings, rollout=module.rollout_settings,
                         optimizer=module.optimizer_settings, nonfinite=module.nonfinite)
        self.module = module

    def run(self, batch: RolloutBatch) -> dict[str, float]:
        phase, path = self.module.schedule[self.module.steps_done]
        apply_path(self.module, "skip+prefix" if path == "warmup" else path)
        self.module.last_batch[phase] = batch
        return super().run(batch)


class BenchModule(GRPOModule):
    """GRPOModule whose update path is switched per step by the schedule (``PathSwitchingUpdater``)."""

    schedule: list[tuple[str, str]] = []  # per step: (phase, path)
    last_batch: dict[str, RolloutBatch] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.updater = PathSwitchingUpdater(self)


class SolveMostGroups(SelectionCallback):
    """Late-training stand-in: in the late phase, every group but one scores 1 on every rollout.

    The group left as scored is the first with reward variance (else the first): 7 of 8 groups
    are solved and, where the step has a learning group at all, one learns.
    """

    def __init__(self, schedule: list[tuple[str, str]]) -> None:
        self.schedule = schedule

    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: GRPOModule, batch: RolloutBatch) -> None:
        if self.schedule[pl_module.steps_done][0] != "late" or not len(batch):
            return
        groups = batch.group_indices()  # pool index -> [n_g] rows
        varied = [p for p, rows in groups.items() if float(batch.rewards[rows].max() - batch.rewards[rows].min()) > 1e-6]
        left = varied[0] if varied else next(iter(groups))
        solved = batch.prompt_index != left  # [N]
        batch.rewards = torch.where(solved, torch.ones_like(batch.rewards), batch.rewards)


class StepRecorder(pl.Callback):
    """Per step: wall seconds and the module's logged stage times and update counters."""

    KEYS = ("time/rollout_s", "time/reward_s", "time/update_s", "train/rows_skipped", "train/tokens_in_update",
            "rollouts/generated", "rollouts/effective", "tokens/generated", "groups/solve_all")

    def __init__(self, schedule: list[tuple[str, str]]) -> None:
        self.schedule = schedule
        self.steps: list[dict[str, Any]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        wall = time.perf_counter() - self._t0
        m = {k: float(trainer.callback_metrics[k]) for k in self.KEYS if k in trainer.callback_metrics}
        phase, path = self.schedule[pl_module.steps_done - 1]
        other = wall - m["time/rollout_s"] - m["time/reward_s"] - m["time/update_s"]
        self.steps.append({"step": pl_module.steps_done - 1, "phase": phase, "path": path, "wall_s": wall, "other_s": other, **m})
        print(f"[bench_step] step {pl_module.steps_done - 1} {phase}/{path}: wall {wall:.2f} s, "
              f"update {m['time/update_s']:.2f} s, rollout {m['time/rollout_s']:.2f} s, "
              f"rows skipped {m.get('train/rows_skipped', 0):.0f}", flush=True)


def make_schedule(steps: int) -> list[tuple[str, str]]:
    """Warm-up (untimed) then ``steps`` steps in mirrored path order, for the early phase then the late one."""
    timed = [ORDER[i % len(ORDER)] for i in range(steps)]
    return [(phase, p) for phase in ("early", "late") for p in ["warmup", *timed]]


# --------------------------------------------------------------------------- machine and FLOPs


def gemm_gflops(n: int, seconds: float) -> dict[str, float]:
    """Sustained fp32 GEMM rate: n x n @ n x n repeated for ``seconds``; median and best of 5 windows."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up
    rates = []
    for _ in range(5):
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 5:
            torch.mm(a, b)
            k += 1
        rates.append(2 * n**3 * k / (time.perf_counter() - t0) / 1e9)
    return {"median": statistics.median(rates), "best": max(rates)}


def plan_for(module: GRPOModule, batch: RolloutBatch, path: str):
    rows = torch.nonzero(batch.keep).flatten()
    tensors = collate_rollouts(batch, rows, module._pad_id, module.rollout_settings.mask_truncated)
    normalizer = module.updater.normalizer(tensors)
    s = module.loss_settings
    apply_path(module, path)
    plan = plan_update(tensors, skip_rows=PATHS[path][0], micro_batch_size=s.micro_batch_size,
                       micro_batch_tokens=s.micro_batch_tokens, empty_row=module.updater.empty_row)
    return plan, normalizer, tensors


def update_flops(module: GRPOModule, batch: RolloutBatch, path: str) -> dict[str, float]:
    """FLOPs of one iteration's forward + backward on ``path``'s plan (FlopCounterMode), per padded token too."""
    from torch.utils.flop_counter import FlopCounterMode

    plan, normalizer, _ = plan_for(module, batch, path)
    counter = FlopCounterMode(display=False)
    with counter:
        for mb in plan.micro_batches:
            loss, _ = module.updater.micro_batch_loss(mb, normalizer)
            loss.backward()
    module.policy.zero_grad(set_to_none=True)
    total = float(counter.get_total_flops())
    return {"flops": total, "tokens_in_update": plan.tokens_in_update, "flops_per_token": total / max(plan.tokens_in_update, 1)}


def _fwd_bwd(model: torch.nn.Module, input_ids, attention_mask, keep: int) -> None:
    out = model(input_ids=input_ids, attention_mask=attention_mask,
                position_ids=(attention_mask.cumsum(1) - 1).clamp(min=0), logits_to_keep=keep, use_cache=False)
    out.logits.float().logsumexp(-1).sum().backward()


def prompt_cost(module: GRPOModule, batch: RolloutBatch, repeats: int = 3) -> dict[str, Any]:
    """Seconds of forward+backward over full rows, against completions alone + each group's prompt once.

    The second is what a prefix-reusing update would at least compute (the completions'
    attention to the cached prompt keys aside). Alternating, ``repeats`` times each.
    """
    _, _, t = plan_for(module, batch, "old")
    L = t.completion_len
    comp_attn = t.attention_mask[:, -L:]
    groups = sorted(set(int(i) for i in batch.prompt_index[batch.keep]))
    from lit_rlvr.collate import left_pad

    prompt_ids, prompt_attn = left_pad([batch.prompt_token_ids[g] for g in groups], module._pad_id)
    times: dict[str, list[float]] = {"full_rows": [], "completions_plus_prompts_once": []}
    for _ in range(repeats):
        for name in times:
            t0 = time.perf_counter()
            if name == "full_rows":
                for mb in t.micro_batches(module.loss_settings.micro_batch_size):
                    _fwd_bwd(module.policy, mb.input_ids, mb.attention_mask, L + 1)
            else:
                for s in range(0, len(t), module.loss_settings.micro_batch_size):
                    sl = slice(s, s + module.loss_settings.micro_batch_size)
                    _fwd_bwd(module.policy, t.completion_ids[sl], comp_attn[sl], L + 1)
                _fwd_bwd(module.policy, prompt_ids, prompt_attn, 1)
            times[name].append(time.perf_counter() - t0)
            module.policy.zero_grad(set_to_none=True)
    prompt_tokens = int(t.attention_mask[:, :-L].sum())
    return {
        "rows": len(t), "groups": len(groups), "padded_width": t.input_ids.shape[1], "completion_width": L,
        "prompt_tokens": prompt_tokens, "completion_tokens": int(comp_attn.sum()),
        "prompt_token_share": prompt_tokens / int(t.attention_mask.sum()),
        "seconds": times, "median_s": {k: statistics.median(v) for k, v in times.items()},
    }


# --------------------------------------------------------------------------- runs


def run_fit(steps: int, policy: str) -> tuple[BenchModule, StepRecorder]:
    schedule = make_schedule(steps)
    BenchModule.schedule = schedule
    module = quickstart_module(policy)
    recorder = StepRecorder(schedule)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=len(schedule), logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, callbacks=[SolveMostGroups(schedule), recorder])
    trainer.fit(module, quickstart_data())
    return module, recorder


def summarize(recorder: StepRecorder, flops: dict[str, dict[str, float]], peak: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase in ("early", "late"):
        for path in PATHS:
            rows = [s for s in recorder.steps if s["phase"] == phase and s["path"] == path]
            if not rows:
                continue
            med = {k: statistics.median(r[k] for r in rows) for k in ("wall_s", "time/rollout_s", "time/reward_s", "time/update_s", "other_s", "train/tokens_in_update", "train/rows_skipped")}
            fpt = flops[f"{phase}/{path}"]["flops_per_token"]
            achieved = [fpt * r["train/tokens_in_update"] / r["time/update_s"] / 1e9 for r in rows]
            med["update_gflops_per_s"] = statistics.median(achieved)
            med["achieved_over_peak"] = med["update_gflops_per_s"] / peak
            out[f"{phase}/{path}"] = med
        for path in ("skip", "skip+prefix"):
            if f"{phase}/old" in out and f"{phase}/{path}" in out:
                new, old = out[f"{phase}/{path}"], out[f"{phase}/old"]
                out[f"{phase}/{path}_over_old"] = {"update": new["time/update_s"] / old["time/update_s"], "wall": new["wall_s"] / old["wall_s"]}
    for path in PATHS:
        if f"late/{path}" in out and f"early/{path}" in out:
            out[f"late_over_early_update/{path}"] = out[f"late/{path}"]["time/update_s"] / out[f"early/{path}"]["time/update_s"]
    if "late/skip+prefix" in out and "early/old" in out:
        out["late_new_over_early_old_update"] = out["late/skip+prefix"]["time/update_s"] / out["early/old"]["time/update_s"]
    return out


def profile_one_step() -> None:
    """cProfile the second step of the quick-start (the first warms up), new path; print the top functions."""
    BenchModule.schedule = [("early", "skip+prefix")] * 2
    module = quickstart_module()
    profiler = cProfile.Profile()

    class Toggle(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if pl_module.steps_done == 1:
                profiler.enable()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            profiler.disable()

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, callbacks=[Toggle()])
    trainer.fit(module, quickstart_data())
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(profiler, stream=s).sort_stats(key).print_stats(30)
        print(s.getvalue())


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps per phase (mirrored order; a multiple of 6)")
    parser.add_argument("--gemm-n", type=int, default=2048)
    parser.add_argument("--gemm-seconds", type=float, default=5.0)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--policy", default="smollm2-135m-instruct", help='"tiny" for a quick smoke run of the script')
    parser.add_argument("--profile", action="store_true", help="cProfile one quick-start step instead")
    args = parser.parse_args(argv)
    if args.profile:
        profile_one_step()
        return
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = os.getloadavg()
    gemm_before = gemm_gflops(args.gemm_n, args.gemm_seconds)
    print(f"[bench_step] GEMM before: {gemm_before}", flush=True)
    module, recorder = run_fit(args.steps, args.policy)
    gemm_after = gemm_gflops(args.gemm_n, args.gemm_seconds)
    print(f"[bench_step] GEMM after: {gemm_after}", flush=True)
    flops = {f"{phase}/{path}": update_flops(module, module.last_batch[phase], path)
             for phase in ("early", "late") for path in PATHS}
    prompt = prompt_cost(module, module.last_batch["early"])
    peak = statistics.median([gemm_before["median"], gemm_after["median"]])
    result = {
        "started": started, "torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
        "gemm_gflops": {"before": gemm_before, "after": gemm_after, "n": args.gemm_n, "peak_used": peak},
        "steps": recorder.steps, "flops": flops, "prompt_cost": prompt,
        "summary": summarize(recorder, flops, peak),
    }
    print(json.dumps(result["summary"], indent=1))
    print(json.dumps({k: result[k] for k in ("gemm_gflops", "flops", "prompt_cost", "load_avg_before", "load_avg_after")}, indent=1))
    if args.json_out:
        os.makedirs(os.path.dirname(args.json_out) or ".", exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
