"""Benchmark: lit-rlvr and TRL's ``GRPOTrainer`` side by side, same model, data and settings (not a test).

Both trainers run GRPO on the same tiny random Llama (``PolicyConfig(name_or_path="tiny")``,
saved once with ``save_pretrained`` so both load identical weights from one folder), the same
reasoning-gym prompts in the same order (lit-rlvr's ``PromptDataModule`` serves pool k; TRL
gets those pools concatenated as a ``datasets.Dataset`` of conversational "prompt" messages,
unshuffled, so its step k sees the same 4 prompts), the same reward (one
``ReasoningGymReward(extraction="last_number")`` object; TRL calls its ``score``), G = 4,
B = 4 prompts (16 completions) per step, 16 new tokens at most, temperature 1, AdamW at
lr 1e-4 with betas (0.9, 0.99), constant LR, grad-norm clip 1.0, no KL, one iteration, the
token-mean ("dapo") loss with clip range [0.8, 1.28] and group-std advantages, fp32,
one forward/backward of all 16 completions per step, Hugging Face ``generate`` on both.

Each side runs in its own subprocess (fresh interpreter, same Python), launched back to back
in A/B/A/B order (``--rounds`` pairs) so that drift in the shared machine's load hits both
alike. Every run trains ``--warmup + --steps`` steps and times the last ``--steps``:

* seconds per step: a Lightning callback (``on_train_batch_start`` -> ``on_train_batch_end``)
  and a TRL ``TrainerCallback`` (``on_step_begin`` -> ``on_step_end``); both spans hold
  generation, reward, forward/backward and the optimizer step. The start-to-start interval
  ("cycle") is recorded too: it adds each framework's work between steps (data loading,
  logging).
* generated tokens: lit-rlvr's per-step ``tokens/generated`` (from its cumulative counter),
  TRL's ``completion_ids`` lengths counted in the reward function (EOS included on both
  sides); tokens/s = timed tokens / timed step seconds.

Run it with the TRL environment's Python (``bash scripts/setup_trl_env.sh`` builds it)::

    OMP_NUM_THREADS=1 .venv-trl/bin/python benchmarks/bench_trl.py            # 3 rounds, 2 + 20 steps (~5 min)
    OMP_NUM_THREADS=1 .venv-trl/bin/python benchmarks/bench_trl.py --rounds 1 --steps 5 --json-out out.json
    OMP_NUM_THREADS=1 .venv-trl/bin/python benchmarks/bench_trl.py --model smollm2-lora --rounds 2 --steps 5

Equal work against defaults: lit-rlvr skips zero-advantage rows, computes each group's prompt once
(when configured) and its HF engine drops finished rows; TRL does none of these. ``--equal-work``
turns them off on the lit-rlvr side (``--lit-loss skip_zero_advantage=false share_prompt_prefix=false``,
``--lit-engine decoder=generate merge_lora=false generation_dtype=float32``); ``--lit-loss KEY=VALUE``
and ``--lit-engine KEY=VALUE`` set any single option (JSON values), and both are recorded in the JSON::

    OMP_NUM_THREADS=1 .venv-trl/bin/python benchmarks/bench_trl.py --model smollm2-lora --equal-work
    OMP_NUM_THREADS=1 .venv-trl/bin/python benchmarks/bench_trl.py --model smollm2-lora --lit-loss share_prompt_prefix=true

``--model smollm2-lora`` runs both sides on the quick-start's SmolLM2-135M-Instruct (the
cached safetensors folder, loaded by path on both sides) with the same LoRA on both: r 16, alpha 32,
dropout 0, all linear layers (lit-rlvr's ``LoraSettings``; TRL's ``peft_config=LoraConfig(...)``, the
same arguments lit-rlvr passes to peft). The initial-weights check then covers the frozen base weights
(LoRA's A matrices are drawn by each side's own RNG; B is zero, so both start from the same function).

The results table and how it was measured are in docs/trl_comparison.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

G = 4  # num_generations
B = 4  # prompts per step
MAX_NEW = 16  # max_completion_length = max_new_tokens
LR = 1e-4
BETAS = (0.9, 0.99)
EPS_LOW, EPS_HIGH = 0.2, 0.28
MAX_GRAD_NORM = 1.0
TASK = "basic_arithmetic"
TASK_CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
TRAIN_SIZE, VAL_SIZE = 64, 8
SEED = 0


# --------------------------------------------------------------------------- shared set-up


LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}


def build_inputs(workdir: Path, total_steps: int, model_name: str = "tiny") -> dict[str, Any]:
    """Save the tiny model + tokenizer once (or point at the cached SmolLM2), and the prompts of steps 0..total_steps-1 as lit-rlvr serves them."""
    import torch

    from lit_rlvr.policy import PolicyConfig, ensure_smollm2_cache, load_policy, save_tokenizer

    if model_name == "smollm2-lora":
        model_dir = ensure_smollm2_cache()
        model, _ = load_policy(PolicyConfig(name_or_path=str(model_dir)))
    else:
        model_dir = workdir / "tiny-model"
        model, tokenizer = load_policy(PolicyConfig(name_or_path="tiny"))
        model.save_pretrained(model_dir, safe_serialization=True)
        save_tokenizer(tokenizer, model_dir)

    dm = make_datamodule()
    dm.setup()
    steps = []
    for k in range(total_steps):
        pool = dm.pool(k)
        steps.append(
            [
                {"id": int(i), "messages": m, "answer": a, "metadata": md}
                for i, m, a, md in zip(pool.ids.tolist(), pool.messages, pool.answers, pool.metadata)
            ]
        )
    prompts_file = workdir / "prompts.json"
    prompts_file.write_text(json.dumps(steps))
    return {
        "model_dir": str(model_dir),
        "prompts_file": str(prompts_file),
        "weights_sha256": weights_digest(model),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "torch_threads": torch.get_num_threads(),
    }


EQUAL_WORK_LOSS = ["skip_zero_advantage=false", "share_prompt_prefix=false"]
"""--equal-work: lit-rlvr computes every row and every row's prompt in the update, as TRL does."""
EQUAL_WORK_ENGINE = ["decoder=generate", "merge_lora=false", "generation_dtype=float32"]
"""--equal-work: lit-rlvr's HF engine decodes every row until the longest ends, through the
unmerged LoRA layers in float32, as TRL's ``generate`` does."""


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """["key=value", ...] -> {key: value}, values read as JSON (true, 3, 0.5, "x") or else kept as strings."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def make_datamodule():
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource

    source = ReasoningGymSource(tasks=TASK, task_config=dict(TASK_CONFIG), train_size=TRAIN_SIZE, val_size=VAL_SIZE)
    return PromptDataModule(source, batch_size=B, val_batch_size=VAL_SIZE)


def weights_digest(model) -> str:
    """sha256 over the parameters (sorted by name; tied weights once); under peft, the frozen base weights
    under their original names (LoRA's own A/B matrices are left out)."""
    h = hashlib.sha256()
    named = []
    for name, p in model.named_parameters():
        if "lora_" in name:
            continue
        named.append((name.removeprefix("base_model.model.").replace(".base_layer.", "."), p))
    for name, p in sorted(named, key=lambda x: x[0]):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().float().numpy().tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- lit-rlvr worker


def run_lit(args: argparse.Namespace) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch

    from lit_rlvr.module import GRPOModule, LossSettings, OptimizerSettings, RolloutSettings
    from lit_rlvr.policy import LoraSettings, PolicyConfig
    from lit_rlvr.rewards import ReasoningGymReward

    steps_prompts = json.loads(Path(args.prompts_file).read_text())
    total = args.warmup + args.steps
    module = GRPOModule(
        policy=PolicyConfig(name_or_path=args.model_dir, lora=LoraSettings(**LORA) if args.model == "smollm2-lora" else None),
        rollout=RolloutSettings(
            num_generations=G, temperature=1.0, top_p=1.0, max_new_tokens=MAX_NEW,
            engine_options=parse_options(args.lit_engine),
        ),
        loss=LossSettings(
            **parse_options(args.lit_loss),  # e.g. skip_zero_advantage=false (--equal-work)
            epsilon_low=EPS_LOW,
            epsilon_high=EPS_HIGH,
            dual_clip=None,  # TRL has no dual clip
            aggregation="token-mean",  # = TRL loss_type="dapo"
            scale_rewards=True,
            kl_coef=0.0,
            num_iterations=1,
            micro_batch_size=B * G,  # one forward/backward of all 16 completions, as TRL's batch of 16
        ),
        optimizer=OptimizerSettings(lr=LR, weight_decay=0.0, betas=BETAS, warmup_steps=0, max_grad_norm=MAX_GRAD_NORM),
        rewards=[ReasoningGymReward(extraction="last_number")],
        seed=SEED,
        checkpoint_every_n_steps=None,
    )
    dm = make_datamodule()

    class StepTimer(pl.Callback):
        def __init__(self) -> None:
            self.records: list[dict[str, Any]] = []
            self._t0 = 0.0
            self._tokens0 = 0
            self._prev_start: float | None = None
            self.info: dict[str, Any] = {}

        def on_train_start(self, trainer, pl_module) -> None:
            policy = pl_module.policy
            self.info = {
                "weights_sha256": weights_digest(policy),
                "trainable_parameters": sum(q.numel() for q in policy.parameters() if q.requires_grad),
                "attn_implementation": policy.config._attn_implementation,
                "dtype": str(next(policy.parameters()).dtype),
                "torch_threads": torch.get_num_threads(),
            }
            from lit_rlvr.prompts import render_prompt

            self.info["prompt_token_ids_step0"] = [
                render_prompt(pl_module.tokenizer, p["messages"]) for p in steps_prompts[0]
            ]

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            now = time.perf_counter()
            if self._prev_start is not None and self.records:
                self.records[-1]["cycle_s"] = now - self._prev_start
            self._prev_start = now
            self._tokens0 = pl_module.totals.tokens_generated
            self.info.setdefault("pool_ids", []).append(batch.ids.tolist())
            self._t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            dt = time.perf_counter() - self._t0
            m = trainer.callback_metrics
            self.records.append(
                {
                    "step": len(self.records),
                    "step_s": dt,
                    "tokens": pl_module.totals.tokens_generated - self._tokens0,
                    "tokens_metric": float(m["tokens/generated"]) if "tokens/generated" in m else None,
                    "completions": float(m["rollouts/generated"]) if "rollouts/generated" in m else None,
                    "reward_mean": float(m["reward/mean"]) if "reward/mean" in m else None,
                    # rollout stage = generation + reward scoring (TRL's side: _generate_and_score_completions)
                    "rollout_stage_s": float(m["time/rollout_s"]) + float(m["time/reward_s"]),
                    "update_s": float(m["time/update_s"]),
                }
            )

    timer = StepTimer()
    trainer = pl.Trainer(
        max_steps=total,
        logger=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    pl.seed_everything(SEED, workers=False, verbose=False)
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    fit_s = time.perf_counter() - t0
    expected = [[p["id"] for p in s] for s in steps_prompts[:total]]
    return {
        "side": "lit-rlvr",
        "records": timer.records,
        "fit_s": fit_s,
        "same_prompts_as_prepared": timer.info.pop("pool_ids", None) == expected,
        **timer.info,
    }


# --------------------------------------------------------------------------- TRL worker


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import datasets
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lit_rlvr.rewards import ReasoningGymReward

    steps_prompts = json.loads(Path(args.prompts_file).read_text())
    total = args.warmup + args.steps
    rows = [p for step in steps_prompts[:total] for p in step]  # step k = rows [B*k, B*k+B)
    dataset = datasets.Dataset.from_list([{"prompt": r["messages"], "row": i} for i, r in enumerate(rows)])

    reward = ReasoningGymReward(extraction="last_number")
    counter = {"tokens": 0, "completions": 0, "rows": []}

    def reasoning_gym_last_number(prompts, completions, completion_ids, row, **kwargs):
        counter["tokens"] += sum(len(ids) for ids in completion_ids)
        counter["completions"] += len(completion_ids)
        counter["rows"].append(sorted(set(row)))
        out = []
        for c, r in zip(completions, row):
            text = c[-1]["content"] if isinstance(c, list) else c
            out.append(reward.score(text, rows[r]["answer"], rows[r]["metadata"]))
        return out

    out_dir = tempfile.mkdtemp(prefix="bench-trl-out-")
    config = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=B * G,  # completions per device per step: one step = 4 prompts x 4
        gradient_accumulation_steps=1,
        num_generations=G,
        max_completion_length=MAX_NEW,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=LR,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=1e-8,
        weight_decay=0.0,
        optim="adamw_torch",  # torch.optim.AdamW, as lit-rlvr (the CPU default would be the fused kernel)
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=MAX_GRAD_NORM,
        beta=0.0,
        num_iterations=1,
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
        loss_type="dapo",
        scale_rewards="group",
        mask_truncated_completions=False,
        gradient_checkpointing=False,  # TRL defaults to True; lit-rlvr's PolicyConfig to False
        bf16=False,
        use_cpu=True,
        model_init_kwargs={"dtype": "float32"},
        shuffle_dataset=False,
        max_steps=total,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=SEED,
    )

    records: list[dict[str, Any]] = []
    state: dict[str, Any] = {"t0": 0.0, "prev": None}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args_, state_, control, **kw):
            now = time.perf_counter()
            if state["prev"] is not None and records:
                records[-1]["cycle_s"] = now - state["prev"]
            state["prev"] = now
            counter["tokens"] = 0
            counter["completions"] = 0
            counter["rollout_stage_s"] = 0.0
            state["t0"] = time.perf_counter()

        def on_step_end(self, args_, state_, control, **kw):
            dt = time.perf_counter() - state["t0"]
            records.append(
                {
                    "step": len(records),
                    "step_s": dt,
                    "tokens": counter["tokens"],
                    "completions": counter["completions"],
                    "rollout_stage_s": counter["rollout_stage_s"],
                }
            )

        def on_log(self, args_, state_, control, logs=None, **kw):
            if logs and records and "completions/mean_length" in logs:
                records[-1]["logged_mean_length"] = logs["completions/mean_length"]
                records[-1]["reward_mean"] = logs.get("reward")
                records[-1]["logged_step_time"] = logs.get("step_time")

    peft_config = None
    if args.model == "smollm2-lora":
        import peft

        peft_config = peft.LoraConfig(task_type="CAUSAL_LM", r=LORA["r"], lora_alpha=LORA["alpha"],
                                      lora_dropout=LORA["dropout"], target_modules=LORA["target_modules"])
    trainer = GRPOTrainer(
        model=args.model_dir,
        reward_funcs=reasoning_gym_last_number,
        args=config,
        train_dataset=dataset,
        callbacks=[StepTimer()],
        peft_config=peft_config,
    )
    # Time TRL's rollout stage (generation, reward, advantages) by wrapping the instance's method: measured, not changed.
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **kw):
        t = time.perf_counter()
        try:
            return generate_and_score(*a, **kw)
        finally:
            counter["rollout_stage_s"] += time.perf_counter() - t

    trainer._generate_and_score_completions = timed_generate_and_score
    model = trainer.model
    info: dict[str, Any] = {
        "weights_sha256": weights_digest(model),
        "trainable_parameters": sum(q.numel() for q in model.parameters() if q.requires_grad),
        "attn_implementation": model.config._attn_implementation,
        "dtype": str(next(model.parameters()).dtype),
        "torch_threads": torch.get_num_threads(),
        "optimizer": config.optim,
        "gradient_checkpointing": config.gradient_checkpointing,
    }
    try:  # the prompt tokens TRL generates from, to compare with lit-rlvr's rendering
        ids, _, _ = trainer._tokenize_prompts([p["messages"] for p in steps_prompts[0]])
        info["prompt_token_ids_step0"] = [list(map(int, x)) for x in ids]
    except Exception as e:  # private API: report, don't fail
        info["prompt_token_ids_step0"] = f"unavailable: {type(e).__name__}: {e}"
    t0 = time.perf_counter()
    trainer.train()
    fit_s = time.perf_counter() - t0
    expected = [sorted(range(B * k, B * k + B)) for k in range(total)]
    return {
        "side": "trl",
        "records": records,
        "fit_s": fit_s,
        "same_prompts_as_prepared": counter["rows"] == expected,
        **info,
    }


# --------------------------------------------------------------------------- orchestration


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(runs: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    timed = [r for run in runs for r in run["records"][warmup:]]
    step_s = [r["step_s"] for r in timed]
    cycles = [r["cycle_s"] for r in timed if "cycle_s" in r]
    tokens = sum(r["tokens"] for r in timed)
    rollout = [r["rollout_stage_s"] for r in timed]
    completions = sum(r.get("completions") or 0 for r in timed)
    return {
        "timed_steps": len(timed),
        "median_s": statistics.median(step_s),
        "p90_s": percentile(step_s, 0.9),
        "mean_s": statistics.fmean(step_s),
        "median_cycle_s": statistics.median(cycles) if cycles else float("nan"),
        "tokens": tokens,
        "tokens_per_step": tokens / len(timed),
        "completions_per_step": completions / len(timed),
        "tokens_per_s": tokens / sum(step_s),
        "median_rollout_stage_s": statistics.median(rollout),
        "median_rest_s": statistics.median([r["step_s"] - r["rollout_stage_s"] for r in timed]),
        "tokens_per_rollout_s": tokens / sum(rollout),
        "per_run_median_s": [statistics.median([r["step_s"] for r in run["records"][warmup:]]) for run in runs],
    }


def worker_main(args: argparse.Namespace) -> None:
    result = run_lit(args) if args.worker == "lit" else run_trl(args)
    Path(args.result_file).write_text(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of every run")
    p.add_argument("--rounds", type=int, default=3, help="A/B pairs (each a lit-rlvr run then a TRL run)")
    p.add_argument("--json-out", type=str, default=None, help="write every per-step record and the summary here")
    p.add_argument("--model", choices=["tiny", "smollm2-lora"], default="tiny", help="tiny random Llama, or SmolLM2-135M-Instruct + LoRA r16 on both sides")
    p.add_argument("--lit-loss", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="lit-rlvr LossSettings fields for the lit-rlvr side, e.g. skip_zero_advantage=false")
    p.add_argument("--lit-engine", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="lit-rlvr HF engine options, e.g. generation_dtype=auto or decoder=generate")
    p.add_argument("--equal-work", action="store_true",
                   help=f"lit-rlvr does TRL's work: --lit-loss {' '.join(EQUAL_WORK_LOSS)} and --lit-engine {' '.join(EQUAL_WORK_ENGINE)}")
    p.add_argument("--worker", choices=["lit", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--prompts-file", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.equal_work:  # explicit --lit-loss / --lit-engine values given after these win
        args.lit_loss = EQUAL_WORK_LOSS + args.lit_loss
        args.lit_engine = EQUAL_WORK_ENGINE + args.lit_engine
    for k, v in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
        os.environ.setdefault(k, v)
    if args.worker:
        worker_main(args)
        return

    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit("TRL is not installed here: bash scripts/setup_trl_env.sh, then run this with .venv-trl/bin/python")
    import torch
    import transformers
    import lightning

    versions = {
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": sys.version.split()[0],
    }
    print(f"versions: {versions}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
    print(f"lit-rlvr loss options {parse_options(args.lit_loss) or 'default'}, "
          f"engine options {parse_options(args.lit_engine) or 'default'}", flush=True)
    total = args.warmup + args.steps
    workdir = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    shared = build_inputs(workdir, total, args.model)
    print(f"model: {args.model}, {shared['num_parameters']:,} parameters, weights sha256 {shared['weights_sha256'][:12]}", flush=True)

    runs: dict[str, list[dict[str, Any]]] = {"lit": [], "trl": []}
    order = ["lit", "trl"] * args.rounds
    t_all = time.perf_counter()
    for i, side in enumerate(order):
        result_file = workdir / f"result-{i}-{side}.json"
        log_file = workdir / f"log-{i}-{side}.txt"
        cmd = [
            sys.executable, os.path.abspath(__file__), "--worker", side,
            "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--model-dir", shared["model_dir"], "--prompts-file", shared["prompts_file"],
            "--result-file", str(result_file), "--model", args.model,
            *[f"--lit-loss={o}" for o in args.lit_loss], *[f"--lit-engine={o}" for o in args.lit_engine],
        ]  # fmt: skip
        t0 = time.perf_counter()
        with open(log_file, "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        wall = time.perf_counter() - t0
        if rc != 0:
            tail = log_file.read_text()[-4000:]
            sys.exit(f"run {i} ({side}) failed with exit code {rc}; log {log_file}:\n{tail}")
        result = json.loads(result_file.read_text())
        result["process_wall_s"] = wall
        runs[side].append(result)
        med = statistics.median([r["step_s"] for r in result["records"][args.warmup :]])
        print(f"run {i + 1}/{len(order)}: {side:4s} median {med:.3f} s/step, process {wall:.0f} s", flush=True)

    # Checks that the two sides ran the same thing.
    checks = {
        "same initial weights (both sides, every run)": all(
            r["weights_sha256"] == shared["weights_sha256"] for side in runs.values() for r in side
        ),
        "same prompt token ids (step 0)": runs["lit"][0]["prompt_token_ids_step0"] == runs["trl"][0]["prompt_token_ids_step0"],
        "same prompts per step as prepared": all(r["same_prompts_as_prepared"] for side in runs.values() for r in side),
        "16 completions every step": all(
            (rec.get("completions") or 0) == B * G for side in runs.values() for r in side for rec in r["records"]
        ),
        "TRL token count = logged completions/mean_length x 16": all(
            abs(rec["tokens"] - rec["logged_mean_length"] * B * G) < 1e-3
            for r in runs["trl"] for rec in r["records"] if "logged_mean_length" in rec
        ),
        "same trainable parameter count": len({r.get("trainable_parameters") for side in runs.values() for r in side}) == 1,
        "same attention implementation": len({r["attn_implementation"] for side in runs.values() for r in side}) == 1,
    }
    lit = summarize(runs["lit"], args.warmup)
    trl_s = summarize(runs["trl"], args.warmup)
    prompt_lens = [len(x) for x in runs["lit"][0]["prompt_token_ids_step0"]]

    print()
    print(f"{args.rounds} x (lit-rlvr, TRL) runs, {args.warmup} warm-up + {args.steps} timed steps each; "
          f"B={B} prompts x G={G} = {B * G} completions/step, <= {MAX_NEW} new tokens; "
          f"attention {runs['lit'][0]['attn_implementation']}; step-0 prompt lengths {prompt_lens} tokens; "
          f"total {time.perf_counter() - t_all:.0f} s")  # fmt: skip
    header = "| | lit-rlvr | TRL | TRL / lit-rlvr |"
    print(header)
    print("|---|---:|---:|---:|")
    rows = [
        ("seconds/step, median", "median_s", "{:.3f}"),
        ("seconds/step, p90", "p90_s", "{:.3f}"),
        ("seconds/step, mean", "mean_s", "{:.3f}"),
        ("start-to-start seconds, median", "median_cycle_s", "{:.3f}"),
        ("generated tokens/step (mean)", "tokens_per_step", "{:.1f}"),
        ("generated tokens/s (tokens / step seconds)", "tokens_per_s", "{:.1f}"),
        ("rollout stage (generate + reward) seconds, median", "median_rollout_stage_s", "{:.3f}"),
        ("rest of the step (loss, backward, optimizer) seconds, median", "median_rest_s", "{:.3f}"),
        ("generated tokens per rollout-stage second", "tokens_per_rollout_s", "{:.1f}"),
    ]
    for label, key, fmt in rows:
        a, b = lit[key], trl_s[key]
        print(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {b / a:.2f} |")
    print(f"| per-run median seconds/step | {', '.join(f'{x:.3f}' for x in lit['per_run_median_s'])} "
          f"| {', '.join(f'{x:.3f}' for x in trl_s['per_run_median_s'])} | |")  # fmt: skip
    print()
    for name, ok in checks.items():
        print(f"check: {name}: {'ok' if ok else 'FAILED'}")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(
                {"versions": versions, "args": vars(args), "shared": shared, "checks": checks,
                 "summary": {"lit-rlvr": lit, "trl": trl_s}, "runs": runs},
                indent=1,
            )
        )  # fmt: skip
        print(f"wrote {args.json_out}")


if __name__ == "__main__":
    main()
