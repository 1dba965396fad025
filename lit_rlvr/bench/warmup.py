"""Supervised warm-up of a tiny policy, so GRPO starts where per-prompt pass rates spread.

A randomly initialised model solves nothing: every group is all-wrong and no selection
strategy has anything to choose. The real-model benchmark therefore first trains the
``"tiny"`` Llama of ``lit_rlvr.policy`` by supervised learning on the benchmark's own
training prompts, rendered exactly as ``lit-rlvr fit`` renders them
(``PromptDataModule.messages_for`` + chat template, ``render_prompt``), followed by the
reference answer and EOS, with cross-entropy on the answer tokens only (AdamW, constant lr). With ``sft_size``
(the default) it trains on that many *fresh* questions of the same task, generated after the
benchmark's training prompts and never a held-out question, so that GRPO's training prompts
and the held-out prompts are equally new to the model; ``sft_size: 0`` trains on the
benchmark's training prompts themselves (the model then partly memorises them). It stops as soon
as the sampled pass rates of a probe set of GRPO's training prompts, at GRPO's sampling
temperature, are spread (mean and fraction of mixed prompts above thresholds), before the
model solves the task.

``warm_up`` takes the benchmark's fit config (a YAML with ``data.source`` a
``ReasoningGymSource`` and ``model.rewards[0]`` a ``ReasoningGymReward``), so the warm-up
and the GRPO runs see the same prompts, template and scoring.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
import yaml

from lit_rlvr.collate import left_pad
from lit_rlvr.probe import histogram, pass_rates


SFT_FIRST_ENTRY = 2000
"""The warm-up's fresh questions start at this training entry (or after the training set, if larger)."""


@dataclass
class WarmupSettings:
    """The tiny model's size and the SFT loop's hyper-parameters and stopping rule."""

    hidden: int = 128
    layers: int = 2
    heads: int = 4
    sft_size: int = 20_000
    """Fresh questions to train on (0: the benchmark's own training prompts)."""
    lr: float = 3e-3
    batch_size: int = 32
    max_steps: int = 3000
    eval_every: int = 100
    group_size: int = 8
    """Samples per probe prompt when measuring pass rates."""
    temperature: Optional[float] = None
    """Sampling temperature of the probes; None: the config's ``model.rollout.temperature`` (GRPO's)."""
    probe_prompts: int = 32
    min_mean: float = 0.2
    """Stop once the probe's mean pass rate reaches this ..."""
    min_mixed_frac: float = 0.125
    """... and at least this fraction of probe prompts is mixed (0 < pass rate < 1)."""
    seed: int = 0


def load_config(path: str | Path) -> dict:
    return yaml.safe_load(Path(path).read_text()) or {}


def build_datamodule(cfg: dict) -> Any:
    """The config's ``PromptDataModule`` (set up), for a ``ReasoningGymSource``."""
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource

    data = dict(cfg["data"])
    src = data.pop("source")
    if not src["class_path"].endswith("ReasoningGymSource"):
        raise ValueError(f"the warm-up expects data.source to be a ReasoningGymSource, got {src['class_path']}")
    dm = PromptDataModule(ReasoningGymSource(**src.get("init_args", {})), **data)
    dm.setup()
    return dm


def build_reward(cfg: dict) -> Any:
    """The config's first reward, a ``ReasoningGymReward``."""
    from lit_rlvr.rewards import ReasoningGymReward

    r = cfg["model"]["rewards"][0]
    if not r["class_path"].endswith("ReasoningGymReward"):
        raise ValueError(f"the warm-up expects model.rewards[0] to be a ReasoningGymReward, got {r['class_path']}")
    return ReasoningGymReward(**r.get("init_args", {}))


def sft_records(cfg: dict, dm: Any, sft_size: int) -> list[Any]:
    """The warm-up's questions: ``sft_size`` fresh ones of the config's task(s), or ``dm.train_records`` (0).

    Fresh questions are the training entries from ``max(train_size, SFT_FIRST_ENTRY)`` on, in
    the same seeded ``ReasoningGymSource`` (entry i is drawn from ``Random(seed + i)``, so
    extending ``train_size`` keeps the first entries and never yields a validation question).
    The fixed start makes the warm-up data, and so the warm model, the same for any training
    set of up to 2,000 prompts.
    """
    from lit_rlvr.data import ReasoningGymSource

    if sft_size <= 0:
        return list(dm.train_records)
    init = dict(cfg["data"]["source"].get("init_args", {}))
    # start at entry 2,000 at least, so a smaller training set keeps the same warm-up data
    own = max(int(init.get("train_size", 2000)), SFT_FIRST_ENTRY)
    tasks = init.get("tasks", "basic_arithmetic")
    if not isinstance(tasks, str) and len(tasks) != 1:
        raise ValueError("sft_size > 0 needs a single-task ReasoningGymSource; use sft_size 0 for several tasks")
    init["train_size"] = own + int(sft_size)
    return ReasoningGymSource(**init).load("train")[own:]


def answer_examples(tokenizer: Any, dm: Any, records: Sequence[Any]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids as ``lit-rlvr fit`` renders them, answer ids + EOS) per record."""
    from lit_rlvr.prompts import render_prompt

    out = []
    for r in records:
        prompt = render_prompt(tokenizer, dm.messages_for(r.question))
        answer = tokenizer(r.answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((prompt, answer))
    return out


def sft_batch(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Left-padded ``input_ids``, ``attention_mask`` and ``labels`` (N, T); labels are -100 off the answer."""
    ids, mask = left_pad([p + a for p, a in examples], pad_id)
    labels = torch.full_like(ids, -100)
    for j, (_, a) in enumerate(examples):
        labels[j, ids.shape[1] - len(a) :] = torch.tensor(a)
    return ids, mask, labels


def answer_loss(model: Any, ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the answer tokens, computing logits only where they are needed.

    Answers are right-aligned (``sft_batch``). The LM head over a 49k vocabulary dominates a
    tiny model's cost, so the model returns logits for the last ``answer_len + 1`` positions
    only (``logits_to_keep``); the result equals ``model(..., labels=labels).loss``.
    """
    answer_len = int((labels != -100).sum(dim=1).max())
    keep = answer_len + 1
    logits = model(input_ids=ids, attention_mask=attention_mask, logits_to_keep=keep).logits  # (N, keep, V)
    targets = labels[:, -answer_len:]  # (N, answer_len): logits at position t score token t + 1
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100)


def warm_up(config: str | Path, settings: WarmupSettings, out: str | Path, log=print) -> dict:
    """Train the tiny policy on ``config``'s training prompts until pass rates spread; save it to ``out``.

    Returns (and writes to ``out/warmup.json``) a summary: the stopping step, the probe's
    pass-rate histogram, greedy pass@1 on the train and held-out prompts, and the log.
    ``out`` loads with ``policy.name_or_path: <out>``.
    """
    from lit_rlvr.policy import PolicyConfig, load_policy, pad_token_id

    s = settings
    torch.manual_seed(s.seed)
    cfg = load_config(config)
    dm = build_datamodule(cfg)
    reward = build_reward(cfg)
    model, tok = load_policy(PolicyConfig(name_or_path="tiny", tiny_hidden_size=s.hidden, tiny_layers=s.layers,
                                          tiny_heads=s.heads, seed=s.seed))
    n_params = sum(p.numel() for p in model.parameters())
    train, val = dm.train_records, dm.val_records
    log(f"tiny Llama: hidden {s.hidden}, {s.layers} layers, {s.heads} heads, {n_params / 1e6:.2f}M params; "
        f"{len(train)} train prompts ({len({r.question for r in train})} distinct), {len(val)} held-out")
    sft = sft_records(cfg, dm, s.sft_size)
    log(f"warm-up data: {len(sft)} questions ({'fresh' if s.sft_size > 0 else 'the training prompts'})")
    examples = answer_examples(tok, dm, sft)
    max_new = int(cfg["model"]["rollout"]["max_new_tokens"])
    temperature = s.temperature if s.temperature is not None else float(cfg["model"]["rollout"].get("temperature", 1.0))
    probe, probe_val = train[: s.probe_prompts], val[: s.probe_prompts]
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(s.seed)
    history: list[dict] = []
    out = Path(out)
    t0 = time.perf_counter()
    rates: list[float] = []
    met = False
    step = 0
    model.train()
    for step in range(1, s.max_steps + 1):
        idx = torch.randint(len(examples), (s.batch_size,), generator=gen).tolist()
        loss = answer_loss(model, *sft_batch([examples[i] for i in idx], pad_token_id(tok)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % s.eval_every and step != s.max_steps:
            continue
        rates = pass_rates(model, tok, dm, probe, reward, s.group_size, max_new, temperature)
        heldout = pass_rates(model, tok, dm, probe_val, reward, 1, max_new, None)
        mean, mixed = sum(rates) / len(rates), sum(0 < r < 1 for r in rates)
        rec = {"step": step, "loss": round(loss.item(), 4), "mean_pass": round(mean, 3), "mixed": mixed,
               "zero": sum(r == 0 for r in rates), "one": sum(r == 1 for r in rates),
               "heldout_greedy": round(sum(heldout) / len(heldout), 3), "seconds": round(time.perf_counter() - t0, 1)}
        history.append(rec)
        log(json.dumps(rec))
        _save(model, tok, out, {"settings": asdict(s), "step": step, "complete": False, "log": history})
        if mean >= s.min_mean and mixed >= s.min_mixed_frac * len(rates):
            met = True
            break
    if not met:
        log(f"warning: the spread criterion was not met in {s.max_steps} steps; saving the last model")
    greedy_val = pass_rates(model, tok, dm, val, reward, 1, max_new, None)
    greedy_train = pass_rates(model, tok, dm, train[: len(val)], reward, 1, max_new, None)
    summary = {"config": str(config), "settings": asdict(s), "complete": True, "params": n_params, "stopped_at_step": step,
               "criterion_met": met, "seconds": round(time.perf_counter() - t0, 1),
               "probe_pass_rate_histogram": histogram(rates, s.group_size), "probe_mean_pass_rate": sum(rates) / len(rates),
               "greedy_train_pass@1": sum(greedy_train) / len(greedy_train),
               "greedy_heldout_pass@1": sum(greedy_val) / len(greedy_val), "log": history}
    _save(model, tok, out, summary)
    return summary


def _save(model: Any, tokenizer: Any, out: Path, summary: dict) -> None:
    """Write the model, tokenizer and ``warmup.json`` to ``out`` (replacing it): after every probe, so an
    interrupted warm-up leaves its latest model (``"complete": false`` in ``warmup.json``)."""
    from lit_rlvr.policy import save_tokenizer

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    save_tokenizer(tokenizer, tmp)
    (tmp / "warmup.json").write_text(json.dumps(summary, indent=2))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
