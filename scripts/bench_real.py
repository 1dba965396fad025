"""Real-model benchmark: a tiny Llama warmed up by supervised learning, then GRPO under each strategy.

    export OMP_NUM_THREADS=1
    python scripts/bench_real.py warmup                   # SFT, stops early; writes runs/bench_real/warm
    python scripts/bench_real.py run --seeds 0 1          # every strategy x seed, equal rollout budget
    python scripts/bench_real.py report --target 0.5      # scripts/report.py + docs/img/real_*.png

``warmup`` builds the "tiny" policy of ``lit_rlvr.policy`` (a random Llama over the SmolLM2
tokenizer), renders the training prompts of ``configs/bench/real.yaml`` exactly as a
``lit-rlvr fit`` renders them (``PromptDataModule.messages_for`` + the chat template, via
``lit_rlvr.rollout.loop.render_prompt``), appends the reference answer and EOS, and trains
on the answer tokens with a plain torch loop. Every ``--eval-every`` steps it samples G
completions at temperature 1 for each of ``--probe-prompts`` train prompts, scores them with
the config's reward, and stops as soon as the per-prompt pass rates are spread (enough prompts
strictly between 0 and 1, mean pass rate at least ``--min-mean``). The model and tokenizer
are saved with ``save_pretrained``, so ``policy.name_or_path`` loads the folder.

``run`` calls ``python -m lit_rlvr.cli fit --config configs/bench/real.yaml --config
configs/methods/<strategy>.yaml --config <run>/budget.yaml ...`` in ``runs/bench_real/<strategy>_seed<S>``;
``budget.yaml`` repeats the method's callbacks and appends ``RolloutBudget`` (this module), which
stops training once the cumulative rollouts generated reach the budget (the same for every
strategy; the step that crosses it finishes, so runs end a little above it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bench" / "real.yaml"
OUT = ROOT / "runs" / "bench_real"
STRATEGIES = ["grpo", "dynamic_sampling", "greso", "pods", "vigor", "sara", "mopps", "dps"]


from lit_rlvr.bench.budget import RolloutBudget  # noqa: E402  (re-exported: scripts.bench_real.RolloutBudget)


# ----------------------------------------------------------------------------- warm-up


def _load_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def _datamodule(cfg: dict):
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource

    data = dict(cfg["data"])
    src = data.pop("source")
    assert src["class_path"].endswith("ReasoningGymSource"), "warmup expects a ReasoningGymSource"
    dm = PromptDataModule(ReasoningGymSource(**src["init_args"]), **data)
    dm.setup()
    return dm


def _reward(cfg: dict):
    from lit_rlvr.rewards import ReasoningGymReward

    r = cfg["model"]["rewards"][0]
    assert r["class_path"].endswith("ReasoningGymReward")
    return ReasoningGymReward(**r.get("init_args", {}))


def pass_rates(model, tokenizer, dm, records, reward, g: int, max_new_tokens: int, temperature: float | None):
    """Per-prompt fraction of correct completions: G samples at ``temperature`` (None: one greedy)."""
    import torch

    from lit_rlvr.rollout.loop import render_prompt

    model.eval()
    prompts = [render_prompt(tokenizer, dm.messages_for(r.question)) for r in records]
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
    if temperature is None:
        kwargs.update(do_sample=False, num_return_sequences=1)
        g = 1
    else:
        kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0, num_return_sequences=g)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    rates = []
    for i, r in enumerate(records):
        scores = [reward.score(t, r.answer, r.metadata) for t in texts[i * g : (i + 1) * g]]
        rates.append(sum(s >= 1.0 for s in scores) / g)
    model.train()
    return rates


def histogram(rates: list[float], g: int) -> dict[str, int]:
    return {f"{k}/{g}": sum(round(r * g) == k for r in rates) for k in range(g + 1)}


def warmup(args) -> None:
    import torch

    from lit_rlvr.policy import PolicyConfig, load_policy
    from lit_rlvr.rollout.loop import render_prompt

    torch.manual_seed(args.seed)
    cfg = _load_yaml(CONFIG)
    dm = _datamodule(cfg)
    reward = _reward(cfg)
    pcfg = PolicyConfig(name_or_path="tiny", tiny_hidden_size=args.hidden, tiny_layers=args.layers,
                        tiny_heads=args.heads, seed=args.seed)
    model, tok = load_policy(pcfg)
    n_params = sum(p.numel() for p in model.parameters())
    train, val = dm.train_records, dm.val_records
    print(f"tiny Llama: hidden {args.hidden}, {args.layers} layers, {args.heads} heads, {n_params/1e6:.2f}M params; "
          f"{len(train)} train prompts ({len({r.question for r in train})} distinct), {len(val)} held-out")

    examples = []
    for r in train:
        p = render_prompt(tok, dm.messages_for(r.question))
        a = tok(r.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        examples.append((p, a))
    max_new = int(cfg["model"]["rollout"]["max_new_tokens"])
    probe = train[: args.probe_prompts]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed)
    log = []
    t0 = time.perf_counter()
    chosen = None
    for step in range(1, args.max_steps + 1):
        idx = torch.randint(len(examples), (args.batch_size,), generator=g).tolist()
        seqs = [examples[i][0] + examples[i][1] for i in idx]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), tok.pad_token_id)
        att = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for j, i in enumerate(idx):
            p, a = examples[i]
            s = p + a
            ids[j, width - len(s):] = torch.tensor(s)
            att[j, width - len(s):] = 1
            labels[j, width - len(a):] = torch.tensor(a)
        loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.eval_every == 0:
            rates = pass_rates(model, tok, dm, probe, reward, args.g, max_new, 1.0)
            mixed = sum(0 < r < 1 for r in rates)
            mean = sum(rates) / len(rates)
            rec = {"step": step, "loss": round(loss.item(), 4), "mean_pass": round(mean, 3), "mixed": mixed,
                   "zero": sum(r == 0 for r in rates), "one": sum(r == 1 for r in rates),
                   "seconds": round(time.perf_counter() - t0, 1)}
            log.append(rec)
            print(json.dumps(rec), flush=True)
            if mean >= args.min_mean and mixed >= args.min_mixed_frac * len(rates):
                chosen = (step, rates)
                break
    if chosen is None:
        print(f"warning: no step met the spread criterion in {args.max_steps} steps; saving the last", flush=True)
        chosen = (step, pass_rates(model, tok, dm, probe, reward, args.g, max_new, 1.0))
    step, rates = chosen
    greedy_val = pass_rates(model, tok, dm, val, reward, 1, max_new, None)
    greedy_train = pass_rates(model, tok, dm, train, reward, 1, max_new, None)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    from lit_rlvr.policy import save_tokenizer

    save_tokenizer(tok, out)
    summary = {"stopped_at_step": step, "seconds": round(time.perf_counter() - t0, 1), "params": n_params,
               "hidden": args.hidden, "layers": args.layers, "heads": args.heads, "lr": args.lr,
               "batch_size": args.batch_size, "G": args.g, "probe_prompts": len(probe),
               "pass_rate_histogram": histogram(rates, args.g), "mean_pass_rate": sum(rates) / len(rates),
               "greedy_train_pass@1": sum(greedy_train) / len(greedy_train),
               "greedy_heldout_pass@1": sum(greedy_val) / len(greedy_val), "log": log}
    (out / "warmup.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "log"}, indent=2))


# ----------------------------------------------------------------------------- runs


def run(args) -> None:
    import yaml

    warm = Path(args.warm).resolve()
    if not (warm / "config.json").is_file():
        raise SystemExit(f"{warm} holds no model: run `python scripts/bench_real.py warmup` first")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    times = {}
    times_path = OUT / "wall_times.json"
    if times_path.is_file():
        times = json.loads(times_path.read_text())
    for strategy in args.strategies:
        method = ROOT / "configs" / "methods" / f"{strategy}.yaml"
        callbacks = list((_load_yaml(method).get("trainer") or {}).get("callbacks") or [])
        callbacks.append({"class_path": "lit_rlvr.bench.budget.RolloutBudget", "init_args": {"budget": args.budget}})
        for seed in args.seeds:
            rd = OUT / f"{strategy}_seed{seed}"
            if rd.exists():
                shutil.rmtree(rd)
            rd.mkdir(parents=True)
            (rd / "budget.yaml").write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}, sort_keys=False))
            cmd = [sys.executable, "-m", "lit_rlvr.cli", "fit", "--config", str(CONFIG), "--config", str(method),
                   "--config", "budget.yaml", "--seed_everything", str(seed), "--model.seed", str(seed),
                   "--data.seed", str(seed), "--model.policy.name_or_path", str(warm)]
            t0 = time.perf_counter()
            with open(rd / "fit.log", "w") as logf:
                rc = subprocess.call(cmd, cwd=rd, env=env, stdout=logf, stderr=subprocess.STDOUT)
            dt = time.perf_counter() - t0
            times[f"{strategy}_seed{seed}"] = round(dt, 1)
            times_path.write_text(json.dumps(times, indent=2))
            print(f"{strategy} seed {seed}: rc {rc}, {dt:.1f} s", flush=True)
            if rc != 0:
                print((rd / "fit.log").read_text()[-3000:], flush=True)


def report(args) -> None:
    runs = sorted(p for p in OUT.glob("*_seed*") if p.is_dir())
    out = OUT / "report"
    cmd = [sys.executable, str(ROOT / "scripts" / "report.py"), *map(str, runs), "--out", str(out)]
    if args.target:
        cmd += ["--target", *map(str, args.target)]
    subprocess.check_call(cmd, cwd=ROOT)
    img = ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    for png in out.glob("*.png"):
        shutil.copy(png, img / f"real_{png.name}")
        print(f"copied {png.name} -> docs/img/real_{png.name}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warmup", help="supervised warm-up of the tiny policy")
    w.add_argument("--out", default=str(OUT / "warm"))
    w.add_argument("--hidden", type=int, default=128)
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--heads", type=int, default=4)
    w.add_argument("--lr", type=float, default=3e-3)
    w.add_argument("--batch-size", type=int, default=32)
    w.add_argument("--max-steps", type=int, default=400)
    w.add_argument("--eval-every", type=int, default=10)
    w.add_argument("--g", type=int, default=8, help="samples per prompt when measuring pass rates")
    w.add_argument("--probe-prompts", type=int, default=64)
    w.add_argument("--min-mean", type=float, default=0.3, help="stop once the mean pass rate reaches this ...")
    w.add_argument("--min-mixed-frac", type=float, default=0.5, help="... and this fraction of prompts is mixed")
    w.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="GRPO under each strategy and seed, equal rollout budget")
    r.add_argument("--strategies", nargs="+", default=STRATEGIES)
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    r.add_argument("--budget", type=int, default=2048, help="cumulative rollouts generated per run")
    r.add_argument("--warm", default=str(OUT / "warm"))
    q = sub.add_parser("report", help="scripts/report.py over the runs; PNGs to docs/img/real_*.png")
    q.add_argument("--target", type=float, nargs="+", default=None)
    args = p.parse_args(argv)
    {"warmup": warmup, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
