"""ARRoL: online rollout pruning with a learned quality head, during generation.

"Prune as You Generate" (ARRoL, arXiv 2603.24840; code not public). docs/methods.md, "ARRoL":
every prompt starts a group of G rollouts; at ``detect_tokens`` tokens a quality head predicts
each partial rollout's chance of ending correct, and the group is pruned to K·G survivors whose
predicted positive fraction is near ρ (a correctness-balanced group has the largest reward
variance). Only survivors are continued, scored and trained on. A rollout that stopped before
``detect_tokens`` is complete and subject to the same rule with its true reward (p = 1 if it is
a success, else 0).

What the paper leaves open, decided here (each a constructor argument where it matters):

* **Head input.** The last-layer hidden state (after the final norm) at the partial's last token,
  of the model that generated it. The HF engine returns it from its generating forward (the
  compact decoder on its decode copy: LoRA merged, in ``generation_dtype``; ``generate`` on the
  policy under FSDP2; a row stays for one extra forward, see ``rollout/hf.py``); for other engines
  one batched no-grad forward of the policy over prompt + partial
  (``rollout.hidden.last_hidden_states``), timed in ``time/prune_s``. The test-time vote computes
  its states with the same model (``arrol_vote.state_model``).
* **Head.** LayerNorm (no affine) → Linear(H, ``head_width``) → ReLU → Linear(·, 1); Adam
  (``head_lr``), ``head_steps`` full-batch steps per training step over a FIFO buffer of the last
  ``buffer_size`` (state, outcome) pairs, gathered from every rank. Outcome = total reward >=
  ``success_threshold``. It learns from rollouts whose final reward is known: survivors and
  rollouts that stopped early (pruned partial rollouts never get one, so after the cold start
  the head sees mostly survivors).
* **Calibration.** ``calibration_buckets`` equal-width buckets of the raw score, each a Beta(1, 1)
  + outcome counts posterior, counts multiplied by ``calibration_decay`` every step (the head moves).
* **L_detect.** ``detect_tokens`` (paper: 512, for 2-4k-token completions); left unset it is
  min(512, round(``detect_fraction``·max_new_tokens)) at setup, ``detect_fraction`` = 0.25: the
  paper's 512 at its lengths of 2048 tokens and more, a quarter of shorter completions (512 is a
  quarter of 2048 and an eighth of 4096), so a method config composes with any base config.
* **Survivor rule.** ``keep = max(min_keep, round(K·n))`` of each round's n rollouts of a prompt
  (``min_keep`` = 2: a group of one has no reward variance): the subset whose mean calibrated p̂ is
  nearest ρ, exact for any n (``choose_survivors``: a search over how many of each distinct p̂ to
  keep), ties broken by a draw seeded by (seed, step, prompt id, round).
* **Cold start.** For the first ``cold_start_steps`` steps, and always with ``survivors="random"``
  (the paper's control), the k survivors are a seeded random subset; the head trains and is
  measured either way, so the control reports head AUC too.
* **tokens_saved.** An estimate: pruned partial rollouts × the mean tokens the continued
  survivors of the same step generated after ``detect_tokens``.

State (``state_dict``): the head's weights, optimizer and buffer; the calibration counts; the
cumulative counters. Lightning saves it with every checkpoint; ``lit_rlvr.arrol_vote`` loads it to
weight test-time votes by the head's calibrated p̂ (``vote_weights``).

Several ranks (DDP or FSDP2; docs/arrol.md, "Several ranks"): each rank prunes the groups it rolls
out. Every rank trains on the same gathered rows (``gather_rows``, in rank order) from the same
initial weights, and the step's counts (pruned, kept, tokens saved) are summed over ranks, so the
head, the calibration, the counters and every pruning rule are identical on every rank, the one
state a checkpoint saves is every rank's, and a resume continues as if never stopped. Under FSDP2 a
forward is a collective: ``rollout.pruning.run_pruned_round`` keeps every rank's round in step
(detect call, hidden-state vote, continuation) and the head's fallback forward
(``SelectionHost.last_hidden_states``) pads to the most batches of any rank.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.selection import PartialRollouts, RolloutPruner, SelectionCallback, gather_rows, seeded_generator
from lit_rlvr.callbacks.quality_head import BucketCalibrator, QualityHead, auc, brier, choose_survivors
from lit_rlvr.rollout.hidden import last_hidden_states
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import Completion, RolloutBatch

log = logging.getLogger(__name__)

__all__ = ["ARRoL", "default_detect_tokens", "keep_count"]

PAPER_DETECT_TOKENS = 512

SURVIVORS = ("head", "random")


def keep_count(n: int, keep_ratio: float, min_keep: int = 2) -> int:
    """Survivors of a group of n: round(K·n), at least ``min_keep`` (2: a group of one has no variance), at most n."""
    return min(n, max(int(min_keep), int(math.floor(keep_ratio * n + 0.5))))


def default_detect_tokens(max_new_tokens: int, fraction: float = 0.25) -> int:
    """L_detect when unset: min(512, round(fraction · max_new_tokens)), at least 1 (the paper's 512 from 2048 tokens on)."""
    return min(PAPER_DETECT_TOKENS, max(1, int(math.floor(fraction * max_new_tokens + 0.5))))


class ARRoL(RolloutPruner):
    """Prune each group to K·G survivors at ``detect_tokens`` tokens, steering their predicted positive fraction to ρ.

    Args:
        detect_tokens: L_detect, tokens generated before the decision (paper: 512); it must be below
            ``model.rollout.max_new_tokens``. None (default): ``default_detect_tokens``, set at setup.
        detect_fraction: the share of ``max_new_tokens`` an unset ``detect_tokens`` takes (0.25, capped at 512).
        keep_ratio: K, the share of each group continued (paper: 0.5 beats 0.25 and 0.75).
        target_positive: ρ, the survivors' targeted mean predicted success (paper: 0.5).
        cold_start_steps: steps with random survivors while the head learns (paper: ~20).
        survivors: "head" (the method) or "random" (the paper's control: the same keep ratio,
            random survivors).
        success_threshold: a rollout is a success (head target 1) when its total reward >= this.
        head_width, head_lr, head_steps, buffer_size, head_seed: the quality head (``QualityHead``).
        calibration_buckets, calibration_decay: the online calibration (``BucketCalibrator``).
        min_keep: least survivors per group (2: a group of one has no reward variance).
        forward_batch_size: rows per no-grad forward when the engine gives no hidden states.
    """

    fixes_group_size = True  # G is read once at start-up (a batch controller may not change it)

    wants_hidden_states = True
    state_names = ("head", "calibrator", "totals")
    metric_names = (
        "head_auc", "head_brier", "kept_positive_fraction", "cold_start", "head_loss", "tokens_saved", "rollouts_pruned", "head_updates",
    )

    def __init__(
        self,
        detect_tokens: Optional[int] = None,
        detect_fraction: float = 0.25,
        keep_ratio: float = 0.5,
        target_positive: float = 0.5,
        cold_start_steps: int = 20,
        survivors: str = "head",
        success_threshold: float = 0.5,
        head_width: int = 64,
        head_lr: float = 1e-3,
        head_steps: int = 8,
        buffer_size: int = 1024,
        head_seed: int = 0,
        calibration_buckets: int = 10,
        calibration_decay: float = 0.98,
        min_keep: int = 2,
        forward_batch_size: int = 16,
    ) -> None:
        super().__init__()
        if detect_tokens is not None and detect_tokens < 1:
            raise ValueError(f"ARRoL.detect_tokens must be >= 1 (or unset: a share of max_new_tokens), got {detect_tokens}")
        if not 0 < detect_fraction < 1:
            raise ValueError(f"ARRoL.detect_fraction must be in (0, 1), got {detect_fraction}")
        if min_keep < 1:
            raise ValueError(f"ARRoL.min_keep must be >= 1, got {min_keep}")
        if not 0 < keep_ratio <= 1:
            raise ValueError(f"ARRoL.keep_ratio must be in (0, 1], got {keep_ratio}")
        if not 0 <= target_positive <= 1:
            raise ValueError(f"ARRoL.target_positive must be in [0, 1], got {target_positive}")
        if survivors not in SURVIVORS:
            raise ValueError(f"ARRoL.survivors={survivors!r} is unknown; choose one of {SURVIVORS}")
        if cold_start_steps < 0:
            raise ValueError(f"ARRoL.cold_start_steps must be >= 0, got {cold_start_steps}")
        self.detect_tokens: Optional[int] = None if detect_tokens is None else int(detect_tokens)
        self._detect_auto = detect_tokens is None
        self.detect_fraction = float(detect_fraction)
        self.min_keep = int(min_keep)
        self.keep_ratio = float(keep_ratio)
        self.target_positive = float(target_positive)
        self.cold_start_steps = int(cold_start_steps)
        self.survivors = survivors
        self.success_threshold = float(success_threshold)
        self.forward_batch_size = int(forward_batch_size)
        self.head = QualityHead(head_width, head_lr, head_steps, buffer_size, head_seed)
        self.calibrator = BucketCalibrator(calibration_buckets, calibration_decay)
        self.totals = {"pruned": 0, "kept": 0, "tokens_saved": 0.0, "steps": 0}
        self._host: Optional[SelectionHost] = None
        """The trainer, kept from set-up: ``prune`` is called by the rollout loop without it."""
        self._trainer: Optional[pl.Trainer] = None
        self._rows: list[torch.Tensor] = []  # this step's [m, H + 3] (outcome, raw, kept, state...)
        self._step_counts = {"pruned_partial": 0, "continued_tokens": 0, "continued": 0, "pruned": 0}

    # ------------------------------------------------------------------ contract

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"detect_tokens": self.detect_tokens, "keep_ratio": self.keep_ratio, "target_positive": self.target_positive, "survivors": self.survivors}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: SelectionHost, stage: str) -> None:
        """Resolve an unset ``detect_tokens`` before a checkpoint is restored (it is part of ``state_key``)."""
        self.resolve_detect_tokens(int(pl_module.rollout_settings.max_new_tokens))

    def resolve_detect_tokens(self, max_new_tokens: int) -> int:
        if self._detect_auto:
            self.detect_tokens = default_detect_tokens(max_new_tokens, self.detect_fraction)
        return int(self.detect_tokens)

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        self.resolve_detect_tokens(int(pl_module.rollout_settings.max_new_tokens))
        super().setup_selection(trainer, pl_module, selectors)  # one pruner, composable; detect_tokens < max_new_tokens
        group, least = int(pl_module.group_size), self.min_keep
        if self.keep_ratio * group < least:
            raise ValueError(
                f"ARRoL.keep_ratio={self.keep_ratio} × model.rollout.num_generations={group} = {self.keep_ratio * group:g} < {least}: "
                f"a pruned group needs at least {least} survivors (ARRoL.min_keep; 2 for reward variance). Raise ARRoL.keep_ratio to at least "
                f"{least / group:.3g} or model.rollout.num_generations to at least {math.ceil(least / self.keep_ratio)}"
            )
        self._trainer, self._host = trainer, pl_module

    # ------------------------------------------------------------------ during rollout

    def cold(self, step: int) -> bool:
        """Random survivors this step (the cold start, or the random control)."""
        return self.survivors == "random" or step < self.cold_start_steps

    def predictions(self, partial: PartialRollouts) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[n, H] states, [n] raw head scores and [n] p̂: calibrated scores, or the true outcome where finished."""
        features = partial.hidden
        if features is None:
            if self._host is None:
                raise RuntimeError("ARRoL has no policy to compute hidden states with: it is set up at fit start")
            contexts = [p + c.token_ids for p, c in zip(partial.prompt_token_ids, partial.completions)]
            features = self._host.last_hidden_states(contexts, self.forward_batch_size)  # [n, H]
        raw = self.head.predict(features)  # [n]
        p_hat = self.calibrator(raw)  # [n]
        done = partial.finished
        p_hat[done] = (partial.rewards[done] >= self.success_threshold).double()
        return features, raw, p_hat

    def vote_weights(self, model: Any, prompt_token_ids: list[list[int]], completions: list[Completion], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Test-time vote weights (``lit_rlvr.arrol_vote``): [n] raw head scores and [n] calibrated p̂ of each
        candidate at its detection point, its first ``detect_tokens`` tokens (all of it when shorter: at test
        time no reward is known, so a short candidate gets the head's p̂ at its last token, not its outcome).
        ``model``: the one whose states the head was trained on (``arrol_vote.state_model``: the HF engine's
        decode copy, in its generation dtype)."""
        contexts = [p + c.token_ids[: self.detect_tokens] for p, c in zip(prompt_token_ids, completions)]
        features = last_hidden_states(model, contexts, pad_id, self.forward_batch_size)  # [n, H]
        raw = self.head.predict(features)
        return raw, self.calibrator(raw)

    @override
    def prune(self, partial: PartialRollouts) -> torch.Tensor:
        features, raw, p_hat = self.predictions(partial)
        self._features, self._raw = features, raw
        keep = torch.zeros(len(partial), dtype=torch.bool)
        cold = self.cold(partial.step)
        for p in torch.unique(partial.prompt_index).tolist():
            rows = torch.nonzero(partial.prompt_index == p).flatten()
            k = keep_count(len(rows), self.keep_ratio, self.min_keep)
            gen = seeded_generator(partial.seed, partial.step, int(partial.pool.ids[p]), f"arrol|{partial.round}")
            if cold:
                chosen = torch.randperm(len(rows), generator=gen)[:k]
            else:
                chosen = choose_survivors(p_hat[rows], k, self.target_positive, gen)
            keep[rows[chosen]] = True
        return keep

    @override
    def record_outcomes(self, partial: PartialRollouts, keep: torch.Tensor, rewards: torch.Tensor) -> None:
        """Keep this round's rows with a known final reward (kept rows, and pruned rows that had stopped)."""
        if len(partial) == 0:
            return
        final = torch.where(torch.isfinite(rewards), rewards, partial.rewards)  # [n]
        known = torch.isfinite(final)
        outcome = (final >= self.success_threshold).float()
        rows = torch.cat(
            [outcome[:, None], self._raw.float()[:, None], keep.float()[:, None], self._features.float()], dim=1
        )[known]  # [m, 3 + H]
        self._rows.append(rows)
        pruned_partial = int((~keep & ~partial.finished).sum())
        self._step_counts["pruned_partial"] += pruned_partial
        self._step_counts["pruned"] += int((~keep).sum())

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        """Gather every rank's rows, measure the head on them (before it sees them), then train and calibrate."""
        step = batch.context.step
        dim = 3 + (self._rows[0].shape[1] - 3 if self._rows else self._feature_dim())
        local = torch.cat(self._rows) if self._rows else torch.zeros(0, dim)
        rows = gather_rows(trainer, local)  # [M, 3 + H], identical on every rank
        outcome, raw, kept, features = rows[:, 0], rows[:, 1].double(), rows[:, 2] > 0.5, rows[:, 3:]
        metrics = {
            "head_auc": auc(raw, outcome) if self.head.ready else float("nan"),
            "head_brier": brier(self.calibrator(raw), outcome) if self.head.ready else float("nan"),
            "kept_positive_fraction": float(outcome[kept].mean()) if bool(kept.any()) else float("nan"),
            "cold_start": float(self.cold(step)),
        }
        if len(rows):
            if self.head.ready:
                self.calibrator.update(raw, outcome)
            metrics["head_loss"] = self.head.update(features, outcome)
        # tokens saved (estimate): pruned partial rollouts x mean tokens a continued survivor added after detect,
        # both over every rank, so the counters are the same on every rank (the checkpoint saves one of them).
        extra = [len(c.token_ids) - self.detect_tokens for c in batch.completions if len(c.token_ids) > self.detect_tokens]
        counts = torch.tensor([[self._step_counts["pruned_partial"], self._step_counts["pruned"], len(batch), sum(extra), len(extra)]], dtype=torch.float64)
        pruned_partial, pruned, kept_rows, extra_sum, extra_n = gather_rows(trainer, counts).sum(0).tolist()  # summed over ranks
        cont_mean = extra_sum / extra_n if extra_n else 0.0
        saved = pruned_partial * cont_mean
        self.totals["pruned"] += int(pruned)
        self.totals["kept"] += int(kept_rows)
        self.totals["tokens_saved"] += saved
        self.totals["steps"] += 1
        metrics.update({"tokens_saved": saved, "rollouts_pruned": float(pruned), "head_updates": float(self.head.updates)})
        self.set_metrics(metrics)
        self._rows = []
        self._step_counts = {k: 0 for k in self._step_counts}

    def _feature_dim(self) -> int:
        if self.head.net is not None:
            return int(self.head.net[1].in_features)
        return self._host.hidden_size if self._host is not None else 0
