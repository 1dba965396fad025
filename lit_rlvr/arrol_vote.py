"""ARRoL at test time: k samples per held-out prompt, voted plainly and weighted by the quality head.

"Prune as You Generate" (ARRoL, arXiv 2603.24840; docs/methods.md, "ARRoL"): the quality head learned
during training "also weights votes at test time" (+8.33 average accuracy in the paper). The paper's
code is not public and docs/methods.md states no weighting rule, so the weights are the head's
**calibrated** probability of correctness p̂ (``BucketCalibrator`` over the raw score: the
number the survivor rule also uses), at each candidate's detection point (its first
``detect_tokens`` tokens, the state the head was trained on; ``ARRoL.vote_weights``), computed with
the model whose states the head was trained on (``state_model``: the HF engine's decode model).

From a run's checkpoint and its ``config.yaml``: the policy (LoRA adapter included) and the ARRoL
state (head weights and calibration counts, saved with every checkpoint) are loaded; every
validation prompt gets k completions from validation's own path (``PolicyModule.sample_and_score``:
the same engine, sampling temperature, cap, seed and reward); answers are extracted with the
correctness reward's own ``extraction`` mode. Reported, averaged over prompts:

* ``pass@1``: the mean correctness of the k samples (validation's mean@k);
* ``maj@k``: majority vote over the extracted answers (``lit_rlvr.voting``);
* ``weighted@k``: the vote with each candidate weighted by its calibrated p̂;
* ``pass@k`` (any of the k correct: the ceiling of any vote) and the AUC of the head's raw scores
  and of the weights (calibrated p̂) against the candidates' correctness.

    lit-rlvr arrol-vote --ckpt runs/x/csv/version_0/checkpoints/last.ckpt \\
        --config runs/x/csv/version_0/config.yaml --k 8
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
import yaml

from lit_rlvr.policy import pad_token_id
from lit_rlvr.rewards.answer import ANSWER_MODES, extract_answer
from lit_rlvr.voting import vote_accuracy, vote_winners

__all__ = ["evaluate", "find_arrol_state", "load_run", "main", "state_model"]

RUN_KEYS = ("seed_everything", "trainer", "model", "data", "optimizer", "lr_scheduler")


def load_run(ckpt: str, config: str, overrides: Sequence[str] = ()) -> tuple[Any, Any, Any]:
    """(module, datamodule, ARRoL) of a run: built from its config, weights and ARRoL state from the checkpoint."""
    from lit_rlvr.callbacks import ARRoL
    from lit_rlvr.run.checkpointing import AtomicCheckpointIO
    from lit_rlvr.run.fit_config import build_fit, config_args

    saved = yaml.safe_load(Path(config).read_text())
    saved = {k: v for k, v in saved.items() if k in RUN_KEYS}  # not the fit subcommand's ckpt_path, weights_only
    cli = build_fit(config_args([yaml.safe_dump(saved)], overrides))
    module, data = cli.model, cli.datamodule
    arrols = [cb for cb in cli.trainer.callbacks if isinstance(cb, ARRoL)]
    if len(arrols) != 1:
        raise SystemExit(f"{config} lists {len(arrols)} ARRoL callbacks under trainer.callbacks; the vote needs the run's one ARRoL")
    arrol = arrols[0]
    checkpoint = AtomicCheckpointIO().load_checkpoint(ckpt)
    module.configure_model()
    result = module.load_state_dict(checkpoint["state_dict"], strict=False)
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    missing = sorted(trainable & set(result.missing_keys))
    if result.unexpected_keys or missing:
        raise SystemExit(
            f"{ckpt} does not match {config}'s policy: {len(result.unexpected_keys)} unexpected keys "
            f"{result.unexpected_keys[:3]}, {len(missing)} trained weights missing {missing[:3]}"
        )
    arrol.resolve_detect_tokens(int(module.rollout_settings.max_new_tokens))
    arrol.load_state_dict(find_arrol_state(checkpoint, arrol.state_key, ckpt))
    if not arrol.head.ready:
        raise SystemExit(f"the ARRoL head in {ckpt} never trained (0 updates): its weights would all be equal")
    module.policy.eval()
    return module, data, arrol


def find_arrol_state(checkpoint: dict[str, Any], state_key: str, path: str = "the checkpoint") -> dict[str, Any]:
    """The ARRoL callback state saved in a checkpoint: under ``state_key``, else the only ARRoL entry."""
    states = checkpoint.get("callbacks", {})
    if state_key in states:
        return states[state_key]
    found = [k for k in states if str(k).startswith("ARRoL")]
    if len(found) != 1:
        raise SystemExit(f"{path} holds {len(found)} ARRoL states ({found}); expected {state_key}: was the run trained with ARRoL?")
    return states[found[0]]


def state_model(module: Any) -> Any:
    """The model whose hidden states the head was trained on: the HF engine's ``hidden_state_model`` (the
    model it decodes with: the merged copy, in its generation dtype), else the policy (an engine without
    hidden states, vLLM: ARRoL's forward then ran on the policy)."""
    get = getattr(module.engine, "hidden_state_model", None)
    return get() if callable(get) else module.policy


def answer_mode(module: Any, override: Optional[str] = None) -> str:
    """How answers are extracted for voting: ``override``, else the correctness reward's own ``extraction``."""
    if override:
        return override
    fn = next(f for f in module.scorer.functions if f.name == module.accuracy_reward)
    mode = getattr(fn, "extraction", None)
    if mode not in ANSWER_MODES:
        raise SystemExit(f"the correctness reward {fn.name!r} has no extraction mode: pass --answer-mode (one of {ANSWER_MODES})")
    return mode


@torch.no_grad()
def evaluate(module: Any, data: Any, arrol: Any, k: int, mode: str, max_batches: Optional[int] = None) -> dict[str, Any]:
    """Sample k candidates per validation prompt, vote three ways; per-prompt records included."""
    from lit_rlvr.callbacks.quality_head import auc
    from lit_rlvr.prompts import render_prompt

    pad_id = pad_token_id(module.tokenizer)
    records, all_raw, all_correct = [], [], []
    t0 = time.perf_counter()
    for batch_idx, pool in enumerate(data.val_dataloader()):
        if max_batches is not None and batch_idx >= max_batches:
            break
        sampling = module.eval_sampling(batch_idx)
        completions, correct = module.sample_and_score(pool, sampling, k)  # [P·k], [P·k]
        prompts = [render_prompt(module.tokenizer, m) for m in pool.messages]
        raw, p_hat = arrol.vote_weights(state_model(module), [prompts[i // k] for i in range(len(completions))], completions, pad_id)
        all_raw.append(raw)
        all_correct.append(correct)
        for i in range(len(pool)):
            rows = slice(i * k, (i + 1) * k)
            answers = [extract_answer(c.text, mode) for c in completions[rows]]
            c, w = correct[rows].tolist(), p_hat[rows].tolist()
            records.append({
                "answer": pool.answers[i], "answers": answers, "correct": c, "weights": [round(x, 6) for x in w],
                "pass@1": sum(c) / k, "maj": vote_accuracy(answers, c), "weighted": vote_accuracy(answers, c, w),
                "maj_winners": vote_winners(answers), "weighted_winners": vote_winners(answers, w),
            })
    if not records:
        raise SystemExit("no validation prompts: check data.source's val_size and --max-batches")
    raw, correct = torch.cat(all_raw), torch.cat(all_correct)
    n = len(records)
    return {
        "prompts": n, "k": k, "answer_mode": mode, "detect_tokens": arrol.detect_tokens,
        "temperature": sampling.temperature, "max_new_tokens": sampling.max_new_tokens,
        "pass@1": sum(r["pass@1"] for r in records) / n,
        f"maj@{k}": sum(r["maj"] for r in records) / n,
        f"weighted@{k}": sum(r["weighted"] for r in records) / n,
        f"pass@{k}": sum(max(r["correct"]) for r in records) / n,
        "head_auc": auc(raw, correct), "weight_auc": auc(arrol.calibrator(raw), correct), "head_updates": arrol.head.updates,
        "mean_p_hat_correct": float(arrol.calibrator(raw)[correct > 0.5].mean()) if bool((correct > 0.5).any()) else float("nan"),
        "mean_p_hat_wrong": float(arrol.calibrator(raw)[correct <= 0.5].mean()) if bool((correct <= 0.5).any()) else float("nan"),
        "seconds": time.perf_counter() - t0, "per_prompt": records,
    }


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="lit-rlvr arrol-vote",
        description="ARRoL at test time: pass@1, maj@k and head-weighted vote@k on the validation prompts.",
    )
    parser.add_argument("--ckpt", required=True, help="a checkpoint of an ARRoL run (…/checkpoints/last.ckpt)")
    parser.add_argument("--config", required=True, help="that run's config.yaml (written beside its logs)")
    parser.add_argument("--k", type=int, default=8, help="samples per prompt")
    parser.add_argument("--out", help="JSON path (default: arrol_vote_k<k>.json beside the checkpoint's folder)")
    parser.add_argument("--max-batches", type=int, help="validation pools to use (default: all)")
    parser.add_argument("--answer-mode", choices=ANSWER_MODES, help="answer extraction (default: the correctness reward's)")
    parser.add_argument("overrides", nargs="*", help="extra config flags, e.g. --model.evaluation.temperature=0.8 (after --)")
    args = parser.parse_args(argv)
    if args.k < 1:
        parser.error(f"--k must be >= 1, got {args.k}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    module, data, arrol = load_run(args.ckpt, args.config, args.overrides)
    result = {"ckpt": args.ckpt, "config": args.config, **evaluate(module, data, arrol, args.k, answer_mode(module, args.answer_mode), args.max_batches)}
    out = Path(args.out) if args.out else Path(args.ckpt).resolve().parent.parent / f"arrol_vote_k{args.k}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    k = args.k
    print(f"{result['prompts']} prompts, k={k}, T={result['temperature']}, detect_tokens={result['detect_tokens']}, head AUC {result['head_auc']:.3f} (raw), {result['weight_auc']:.3f} (weights)")
    print(f"pass@1 {result['pass@1']:.4f}  maj@{k} {result[f'maj@{k}']:.4f}  weighted@{k} {result[f'weighted@{k}']:.4f}  (pass@{k} {result[f'pass@{k}']:.4f})")
    print(f"wrote {out}")
    return result
