"""Pilot-Commit: pilot many prompts with a few rollouts, commit the rest of a group to the informative ones.

Reference: Kim, Yang, Yan, Liu, "Spend Your Rollouts Where It Counts: Rollout Allocation for
Group-Based RL Post-Training" (arXiv 2605.26606); released code databricks/pilot-commit
(Apache-2.0), ``recipe/pc/pc_ray_trainer.py`` (``RayPCTrainer.fit``, lines 427-700) and
``recipe/pc/replay_buffer.py``; the rule-level parts are in ``callbacks/pilot_buffer.py``.
docs/pilot_commit.md has the formulas and every choice the paper leaves open.

One step, as the released trainer runs it (round = one batched engine call):

* **pilot**: every round generates ``pilot_size`` rollouts for each fresh prompt (round 0: the
  step's pool, ``data.pool_multiple`` × B prompts, 3 in the paper; later rounds: as many fresh
  draws; with ``replace_excluded`` an excluded prompt is replaced by a further draw, as the
  released dataset drops them). Once scored, a pilot whose accuracy is in ``accuracy_band`` enters
  the buffer with its rollouts; one whose accuracy is >= ``exclude_at`` is skipped from the next
  data epoch on.
* **commit**: in the same round, up to B − (prompts committed so far) buffered prompts, by pilot
  std then recency (``buffer_sampling``), no staler than the buffer keeps them and not committed
  already this step, get ``G − pilot_size`` fresh rollouts each; the trained group is pilot + commit
  (G rows). A pilot of an earlier step is carried into the batch (``RolloutState.carry``); one of
  this step is already a row. A prompt committed and then piloted again in the band stays buffered.
* rounds go on until B prompts are committed or ``max_rounds`` (the released code raises there;
  this trains on what it has). After the step the buffer drops entries with
  ``step − entry.step > max_staleness``, and at an epoch change it drops them all.

Pilot rows of prompts not committed this step are in the batch (counted as generated) with
``keep`` False. A carried pilot is trained like a fresh row: π_old is the current policy, as
the released code recomputes it; ``importance_correction`` instead weights its tokens by
min(π_old/μ, ``importance_cap``) against the log-probs it was sampled with.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.callbacks.pilot_buffer import SAMPLING, Band, BufferEntry, PilotBuffer, band_of, pilot_stats
from lit_rlvr.callbacks.pilot_buffer import truncated_importance_weights
from lit_rlvr.selection import PromptSelector, RolloutAllocator, RolloutFilter, SelectionCallback, TokenWeighter
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import data_epoch, gather_objects, seeded_generator, warn_if_pool_is_batch_sized
from lit_rlvr.types import CarriedGroup, Completion, PromptPool, RolloutBatch, RolloutState

_COUNTS = ("pilot_rollouts", "commit_rollouts", "replayed_rollouts", "trained_rollouts",
           "pilot_tokens", "commit_tokens", "replayed_tokens", "trained_tokens")
"""Per-step counts, summed over ranks: pilot and commit rollouts are generated this step (spent),
replayed ones are carried pilots of earlier steps, trained ones are every row of a committed group."""


class PilotCommit(PromptSelector, RolloutAllocator, RolloutFilter, TokenWeighter):
    """Pilot-Commit (arXiv 2605.26606): an allocator with a replay buffer of piloted prompts.

    Args:
        pilot_size: rollouts per pilot (None: G // 4, the paper's 32 of 128 and 16 of 64). The trained
            group is ``model.rollout.num_generations`` (G) rows: the pilot plus ``G − pilot_size`` committed.
        accuracy_band: (low, high) pilot accuracy a prompt is buffered at (the paper's scripts: 0.125, 0.75).
        exclude_at: a pilot accuracy at or above this skips the prompt from the next data epoch on
            (the scripts: 1.0, all correct); None never excludes.
        max_staleness: after each step, entries with ``step − entry.step > max_staleness`` are evicted
            (the released default 4; a pilot can so be committed up to ``max_staleness + 1`` steps later).
        max_rounds: generation rounds per step before training on what it has (the released cap, 10).
        success_threshold: a rollout with total reward >= this is correct in a pilot's accuracy.
        importance_correction: weight a carried pilot's tokens by min(π_old/μ, importance_cap) against the
            log-probs it was sampled with (False: the released code's π_old recomputation alone).
        importance_cap: the cap of that weight.
        replace_excluded: replace each excluded prompt of a round by a further draw, so a round pilots its full
            share (the released code drops excluded prompts from the dataset); False: a round pilots fewer, and
            one whose draws are all excluded ends the step (this project before 2026-12-06).
        buffer_sampling: which buffered prompts to commit when more are available than needed: ``max_variance``
            (largest pilot std, then most recent; the 1.5B script) or ``random`` (uniform, seeded per step, rank
            and round; the 4B script and the released config's default).
    """

    fixes_group_size = True  # G is read once at start-up (a batch controller may not change it)

    refill = True
    """Like a refilling allocator, it fills the batch with in-band (informative) groups over rounds: a batch
    controller (``AdaptiveBatch``) sets its commit target to the informative batch it aims at."""
    state_names = ("buffer", "totals")
    metric_names = (
        *_COUNTS, "pilot_prompts", "passed", "too_easy", "too_hard", "committed_prompts", "committed_from_buffer",
        "buffer_size", "evicted", "excluded_prompts", "skipped_excluded", "staleness_mean", "staleness_max",
        "round_cap_hit", "is_weight_mean", "cumulative_pilot_rollouts", "cumulative_commit_rollouts",
        "cumulative_trained_rollouts",
    )

    def __init__(
        self,
        pilot_size: Optional[int] = None,
        accuracy_band: Sequence[float] = (0.125, 0.75),
        exclude_at: Optional[float] = 1.0,
        max_staleness: int = 4,
        max_rounds: int = 10,
        success_threshold: float = 1.0,
        importance_correction: bool = False,
        importance_cap: float = 2.0,
        replace_excluded: bool = True,
        buffer_sampling: str = "max_variance",
    ) -> None:
        super().__init__()
        low, high = (float(x) for x in accuracy_band)
        if pilot_size is not None and int(pilot_size) < 1:
            raise ValueError(f"PilotCommit: `pilot_size` must be >= 1 (or None for G // 4), got {pilot_size!r}")
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"PilotCommit: `accuracy_band` must be (low, high) with 0 <= low <= high <= 1, got {list(accuracy_band)}")
        if int(max_staleness) < 0 or int(max_rounds) < 1:
            raise ValueError(f"PilotCommit: need max_staleness >= 0 and max_rounds >= 1, got {max_staleness!r}, {max_rounds!r}")
        if not importance_cap > 0:
            raise ValueError(f"PilotCommit: `importance_cap` must be > 0, got {importance_cap!r}")
        if buffer_sampling not in SAMPLING:
            raise ValueError(f"PilotCommit: `buffer_sampling` must be one of {list(SAMPLING)}, got {buffer_sampling!r}")
        self.pilot_size_setting = None if pilot_size is None else int(pilot_size)
        self.band = (low, high)
        self.exclude_at = None if exclude_at is None else float(exclude_at)
        self.max_staleness = int(max_staleness)
        self.max_rounds = int(max_rounds)
        self.success_threshold = float(success_threshold)
        self.importance_correction = bool(importance_correction)
        self.importance_cap = float(importance_cap)
        self.replace_excluded = bool(replace_excluded)
        self.buffer_sampling = buffer_sampling
        self.pilot_size, self.commit_size = 0, 0  # set from G in setup_selection
        self.buffer = PilotBuffer()
        self.totals = {"pilot_rollouts": 0, "commit_rollouts": 0, "trained_rollouts": 0}
        self._epoch = 0
        self._reset_step()

    def _reset_step(self) -> None:
        self._pilot_round: dict[int, int] = {}  # pool index -> round it was piloted in (this step)
        self._last_pilots: list[int] = []
        self._committed: dict[int, BufferEntry] = {}  # pool index -> the entry committed there
        self._in_step: dict[int, int] = {}  # prompt id -> pool index of a pilot admitted this step, not committed
        self._from_buffer: list[int] = []  # prompt ids of stored entries committed this step
        self._events: list[tuple[str, Any]] = []  # this rank's buffer pops and adds, in order (PilotBuffer.replay)
        self._start: Optional[dict[int, BufferEntry]] = None  # the buffer as the step's rounds began (replayed onto)
        self._new_excluded: list[int] = []
        self._bands = {band.value: 0 for band in Band}
        self._pilot_count, self._cap_hit, self._skipped, self._flushed_epoch = 0, False, 0, 0

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"pilot_size": self.pilot_size_setting, "band": list(self.band), "exclude_at": self.exclude_at,
                "max_staleness": self.max_staleness}

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        G = int(pl_module.group_size)
        self.pilot_size = self.pilot_size_setting if self.pilot_size_setting is not None else G // 4
        if not 1 <= self.pilot_size < G:
            raise ValueError(
                f"PilotCommit: pilot_size={self.pilot_size} must be in [1, model.rollout.num_generations={G}): the trained "
                f"group is G rows, the pilot plus G − pilot_size committed. Raise model.rollout.num_generations or set "
                f"PilotCommit's pilot_size (the paper: a quarter of G)"
            )
        self.commit_size = G - self.pilot_size
        if self.importance_correction and pl_module.lockstep:
            raise ValueError(
                "PilotCommit(importance_correction=true) computes π_old of the carried pilots on each rank, which under "
                "FSDP2 (a collective forward) would leave ranks out of step: set importance_correction: false"
            )
        warn_if_pool_is_batch_sized(trainer, "PilotCommit", "set data.pool_multiple: 3 (the paper pilots 3 × B prompts a round)")

    # ------------------------------------------------------------------ pre-rollout: exclusions and epoch flush

    @override
    def select_prompts(self, trainer: pl.Trainer, pl_module: SelectionHost, pool: PromptPool) -> None:
        epoch = data_epoch(trainer, pool.context.step)
        self._epoch = 0 if epoch is None else epoch
        self._reset_step()
        self._flushed_epoch = self.buffer.drop_epochs_before(self._epoch)
        self._skipped = self.filter_pool(pool, pool.eligible(), pool.context.step, pool.context.seed)

    @override
    def filter_pool(self, pool: PromptPool, indices: list[int], step: int, seed: int) -> int:
        """Skip the prompts whose pilot was all correct in an earlier epoch."""
        out = [i for i, skip in zip(indices, self.buffer.excluded_in(pool.ids[indices].tolist(), self._epoch)) if skip]
        pool.keep[out] = False
        return len(out)

    # ------------------------------------------------------------------ rollout: pilot and commit rounds

    @override
    def plan(self, state: RolloutState) -> torch.Tensor:
        if state.round == 0:
            counted = self._skipped, self._flushed_epoch  # this step's, counted by select_prompts
            self._reset_step()
            self._skipped, self._flushed_epoch = counted
            self._start = dict(self.buffer.entries)
            ctx = state.pool.context
            self._pilot_count = math.ceil(len(state.pool) / ctx.world_size)  # this rank's share of a pool
            pilots = state.pool.eligible()
            if self.replace_excluded:  # this rank's part of the skipped ones, as the ranks split the pool
                pilots += self._fresh_pilots(state, len(range(ctx.rank, self._skipped, ctx.world_size)))
        else:
            self.after_round(state)
            if len(self._committed) >= state.pool.batch_size:
                return torch.zeros(len(state.pool), dtype=torch.long)
            if state.round >= self.max_rounds:
                self._cap_hit = True
                return torch.zeros(len(state.pool), dtype=torch.long)
            pilots = self._fresh_pilots(state, self._pilot_count)
        commits = self._commit(state, state.pool.batch_size - len(self._committed))
        counts = torch.zeros(len(state.pool), dtype=torch.long)
        counts[pilots] = self.pilot_size
        counts[commits] = self.commit_size
        for p in pilots:
            self._pilot_round[p] = state.round
        self._last_pilots = pilots
        return counts

    def _fresh_pilots(self, state: RolloutState, n: int) -> list[int]:
        """Pool indices of up to ``n`` fresh prompts not excluded; with ``replace_excluded`` drawn until ``n`` or the data runs out."""
        out: list[int] = []
        while len(out) < n:
            fresh = state.draw(n - len(out))
            if not fresh:
                break
            self._skipped += self.filter_pool(state.pool, fresh, state.step, state.seed)
            out += [p for p in fresh if bool(state.pool.keep[p])]
            if not self.replace_excluded:
                break
        return out

    def after_round(self, state: RolloutState) -> None:
        """Band the pilots of the round just scored: passed ones enter the buffer (as rows of this step),
        all-correct ones are excluded. The rollout loop has no after-round call, so ``plan`` makes this one
        first in every round after the first, once per finished round."""
        ctx = state.pool.context
        for p in self._last_pilots:
            mean, std = pilot_stats([float(r >= self.success_threshold) for r in state.rewards[p]])
            prompt_id = int(state.pool.ids[p])
            band = band_of(mean, *self.band)
            self._bands[band.value] += 1
            if band is Band.KEEP:
                entry = BufferEntry(prompt_id=prompt_id, step=state.step, epoch=self._epoch, mean=mean, std=std,
                                    count=len(state.rewards[p]), owner=ctx.rank)
                self.buffer.add(entry)
                self._in_step[prompt_id] = p
                self._events.append(("add", entry))
            if self.exclude_at is not None and mean >= self.exclude_at:
                self._new_excluded.append(prompt_id)
        self._last_pilots = []

    def _commit(self, state: RolloutState, need: int) -> list[int]:
        """Pool indices of up to ``need`` buffered prompts this rank commits now (stored ones carried in).

        A prompt committed already this step waits for the next: the released trainer asserts B distinct
        prompts a step (pc_ray_trainer.py line 692)."""
        out, ctx = [], state.pool.context
        done = {e.prompt_id for e in self._committed.values()}
        generator = None
        if self.buffer_sampling == "random":
            generator = seeded_generator(ctx.seed, ctx.step, salt=f"pilot-commit-sample|{ctx.rank}|{state.round}")
        for prompt_id in self.buffer.select(need, owner=ctx.rank, skip=done, method=self.buffer_sampling, generator=generator):
            entry = self.buffer.pop(prompt_id)
            self._events.append(("pop", (prompt_id, ctx.rank)))
            p = self._in_step.pop(prompt_id, None)
            if p is None:  # stored at an earlier step: its pilot is carried in
                p = state.carry(_carried_group(entry, state.pool.batch_size))
                self._from_buffer.append(prompt_id)
            self._committed[p] = entry
            out.append(p)
        return out

    # ------------------------------------------------------------------ observe: store uncommitted pilots, sync, evict

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        step = batch.context.step
        for prompt_id, p in self._in_step.items():  # admitted this step, not committed: stored now
            self.buffer.entries[prompt_id].payload = _payload(batch, p)
        counts, staleness = self._step_counts(batch), [step - e.step for e in self._committed.values()]
        blobs = gather_objects(trainer, {"events": self._events, "committed": self._from_buffer, "excluded": self._new_excluded,
                                         "counts": counts, "bands": self._bands, "staleness": staleness,
                                         "committed_prompts": len(self._committed), "skipped": self._skipped,
                                         "cap_hit": self._cap_hit, "pilot_prompts": len(self._pilot_round)})
        self.buffer.entries = dict(self._start if self._start is not None else self.buffer.entries)
        for blob in blobs:  # rank order: every rank replays every rank's pops and adds onto the same start
            self.buffer.replay(blob["events"])
            for prompt_id in blob["excluded"]:
                self.buffer.excluded.setdefault(int(prompt_id), self._epoch)
        evicted = self.buffer.flush(step, self.max_staleness)
        self._report(blobs, evicted)

    def _step_counts(self, batch: RolloutBatch) -> dict[str, float]:
        """This rank's ``_COUNTS`` from the batch rows."""
        idx, rounds = batch.prompt_index, batch.round
        carried = batch.carried_mask
        committed = torch.tensor([int(p) in self._committed for p in idx.tolist()], dtype=torch.bool)
        pilot = torch.tensor([self._pilot_round.get(p) == r for p, r in zip(idx.tolist(), rounds.tolist())], dtype=torch.bool)
        pilot &= ~carried
        commit = committed & ~pilot & ~carried
        lengths = batch.completion_lengths.float()
        masks = {"pilot": pilot, "commit": commit, "replayed": carried, "trained": committed}
        out = {}
        for name, mask in masks.items():
            out[f"{name}_rollouts"] = float(mask.sum())
            out[f"{name}_tokens"] = float(lengths[mask].sum())
        return out

    def _report(self, blobs: list[dict[str, Any]], evicted: int) -> None:
        counts = {k: sum(b["counts"][k] for b in blobs) for k in _COUNTS}
        for k in self.totals:
            self.totals[k] += int(counts[k])
        staleness = [s for b in blobs for s in b["staleness"]]
        self.set_metrics({
            **counts,
            **{k: float(sum(b["bands"][k] for b in blobs)) for k in ("passed", "too_easy", "too_hard")},
            "pilot_prompts": float(sum(b["pilot_prompts"] for b in blobs)),
            "committed_prompts": float(sum(b["committed_prompts"] for b in blobs)),
            "committed_from_buffer": float(sum(len(b["committed"]) for b in blobs)),
            "buffer_size": float(len(self.buffer)),
            "evicted": float(evicted + self._flushed_epoch),
            "excluded_prompts": float(len(self.buffer.excluded)),
            "skipped_excluded": float(sum(b["skipped"] for b in blobs)),
            "staleness_mean": sum(staleness) / len(staleness) if staleness else float("nan"),
            "staleness_max": float(max(staleness)) if staleness else float("nan"),
            "round_cap_hit": float(any(b["cap_hit"] for b in blobs)),
            **{f"cumulative_{k}": float(v) for k, v in self.totals.items()},
        })

    # ------------------------------------------------------------------ pre-backward and loss

    @override
    def select_rollouts(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> torch.Tensor:
        """[N] True on the rows of committed groups (pilot + commit); other pilots are spent, not trained."""
        return torch.tensor([int(p) in self._committed for p in batch.prompt_index.tolist()], dtype=torch.bool)

    @override
    def token_weights(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> Optional[list[torch.Tensor]]:
        """With ``importance_correction``: min(π_old/μ, cap) per token of each kept carried row; else unchanged."""
        rows = torch.nonzero(batch.carried_mask & batch.keep).flatten().tolist()
        if not self.importance_correction or not rows:
            return batch.token_weights
        weights = batch.token_weights or [torch.ones(len(c.token_ids), dtype=torch.float32) for c in batch.completions]
        prompts = [batch.prompt_token_ids[int(batch.prompt_index[r])] for r in rows]
        current = pl_module.completion_logprobs(prompts, [batch.completions[r].token_ids for r in rows])  # [m, L]
        values = []
        for i, r in enumerate(rows):
            c = batch.completions[r]
            w = truncated_importance_weights(current[i, : len(c.token_ids)], torch.tensor(c.logprobs), self.importance_cap)
            weights[r] = weights[r] * w
            values.append(w)
        self.update_metrics({"is_weight_mean": float(torch.cat(values).mean())})
        return weights


def _payload(batch: RolloutBatch, p: int) -> dict[str, Any]:
    """Pool prompt ``p``'s rows of ``batch``, stored as plain containers (a checkpoint holds them)."""
    rows = torch.nonzero(batch.prompt_index == p).flatten().tolist()
    pool = batch.pool
    return {
        "prompt": {"id": int(pool.ids[p]), "messages": pool.messages[p], "answer": pool.answers[p],
                   "metadata": pool.metadata[p], "solution": pool.solutions[p]},
        "prompt_token_ids": list(batch.prompt_token_ids[p]),
        "completions": [{"token_ids": list(c.token_ids), "logprobs": [float(x) for x in c.logprobs],
                         "finish_reason": c.finish_reason, "text": c.text} for c in (batch.completions[r] for r in rows)],
        "rewards": batch.rewards[rows].clone(),
        "components": {k: v[rows].clone() for k, v in batch.reward_components.items()},
    }


def _carried_group(entry: BufferEntry, batch_size: int) -> CarriedGroup:
    """The stored pilot of ``entry`` as the group ``RolloutState.carry`` takes."""
    data = entry.payload or {}
    q = data["prompt"]
    prompt = PromptPool(ids=torch.tensor([q["id"]]), messages=[q["messages"]], answers=[q["answer"]],
                        metadata=[q["metadata"]], batch_size=batch_size, solutions=[q["solution"]])
    completions = [Completion(**c) for c in data["completions"]]
    return CarriedGroup(prompt=prompt, prompt_token_ids=list(data["prompt_token_ids"]), completions=completions,
                        rewards=data["rewards"].clone(), components={k: v.clone() for k, v in data["components"].items()},
                        step=entry.step)
