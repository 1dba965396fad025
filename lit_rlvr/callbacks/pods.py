"""PODS: generate n rollouts per prompt, train on the m with the most reward variance.

Xu et al., "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM Reinforcement
Learning" (PODS, arXiv 2504.13818); reference code YixuanEvenXu/pods. docs/methods.md, "PODS":

* Max-variance down-sampling: sort a group's rewards; among all m-subsets the variance is
  maximised by the k highest plus the m − k lowest for some k (the paper's Lemma), so
  scanning k = 0..m with prefix sums finds the best subset in O(n log n). With binary
  rewards this keeps m/2 correct and m/2 wrong when both are available.
* Ablation rules: ``random`` (m uniformly at random) and ``max_reward`` (the m highest).
* Advantages are recomputed on the kept m ("after" normalisation): the module's advantage
  stage already normalises over each group's kept rollouts, so this filter only narrows
  ``batch.keep``.
* Defaults in the paper: n = 64, m = 16 (n/m of 2–4 recommended). Here n is
  ``model.rollout.num_generations`` (or whatever the allocator produced) and m is ``num_keep``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.selection import RolloutFilter, SelectionCallback
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import seeded_generator
from lit_rlvr.types import RolloutBatch


__all__ = ["PODS", "max_variance_subset", "max_variance_subsets", "RULES"]

RULES = ("max_variance", "random", "max_reward")

TIE_RTOL = 1e-9
"""Candidate subsets whose variances differ by at most this × spread² tie (spread = the
group's max − min reward): far above float64 noise on centred rewards (~1e-16 · spread²)."""


def max_variance_subsets(rewards: torch.Tensor, m: int) -> torch.Tensor:
    """[K, m] column indices of the max-variance m-subset of each row of ``rewards`` [K, n].

    For each row: sort ascending; subset(k) = the k highest and the m − k lowest; its sum
    and sum of squares come from prefix sums, so every k costs O(1) and a row O(n log n).
    Shift-invariant: each row is centred on its minimum in float64 before the scan (so the
    prefix sums cancel at the scale of the row's spread, not of its magnitude), and two k
    tie when their variances differ by at most ``TIE_RTOL`` · spread² (spread = max − min).
    Ties between k are broken toward the smallest k (fewest of the highest rewards).
    Returned indices are sorted ascending within each row.
    """
    k_rows, n = rewards.shape
    if not 1 <= m <= n:
        raise ValueError(f"max_variance_subsets: need 1 <= m <= n, got m={m}, n={n}")
    if m == n:
        return torch.arange(n).expand(k_rows, n).clone()
    values, perm = torch.sort(rewards.double(), dim=1, stable=True)  # [K, n] ascending
    values = values - values[:, :1]  # [K, n] centred on the row minimum: in [0, spread]
    zero = torch.zeros(k_rows, 1, dtype=torch.float64)
    cs = torch.cat([zero, values.cumsum(1)], dim=1)  # [K, n+1] prefix sums
    cs2 = torch.cat([zero, (values * values).cumsum(1)], dim=1)  # [K, n+1] prefix sums of squares
    ks = torch.arange(m + 1)  # [m+1] number of highest rewards taken
    low_end = m - ks  # [m+1] the m − k lowest are sorted positions [0, m − k)
    high_start = n - ks  # [m+1] the k highest are sorted positions [n − k, n)
    s = cs[:, low_end] + cs[:, n : n + 1] - cs[:, high_start]  # [K, m+1] subset sums
    q = cs2[:, low_end] + cs2[:, n : n + 1] - cs2[:, high_start]  # [K, m+1] subset sums of squares
    var = q / m - (s / m) ** 2  # [K, m+1] population variance of each candidate
    # Candidates within float noise of the best tie; argmax over the bool mask takes the first k.
    tol = TIE_RTOL * values[:, -1:] ** 2  # [K, 1] relative to the row's spread²
    near_best = var >= var.amax(1, keepdim=True) - tol  # [K, m+1]
    best_k = torch.argmax(near_best.to(torch.uint8), dim=1)  # [K] first near-best k
    pos = torch.arange(m).unsqueeze(0)  # [1, m]
    low = (m - best_k).unsqueeze(1)  # [K, 1]
    sorted_pos = torch.where(pos < low, pos, pos + (n - m))  # [K, m] sorted positions kept
    chosen = perm.gather(1, sorted_pos)  # [K, m] original column indices
    return torch.sort(chosen, dim=1).values


def max_variance_subset(rewards: torch.Tensor, m: int) -> torch.Tensor:
    """[m] indices into ``rewards`` [n] of an m-subset with the largest reward variance.

    Worked example: rewards [0.1, 0.9, 0.5, 0.2, 1.0], m = 3. Sorted: 0.1 (0), 0.2 (3),
    0.5 (2), 0.9 (1), 1.0 (4). Candidates k = 0..3: {0.1, 0.2, 0.5} var 0.0289;
    {0.1, 0.2, 1.0} var 0.1622; {0.1, 0.9, 1.0} var 0.1622; {0.5, 0.9, 1.0} var 0.0467.
    k = 1 and k = 2 tie; the first (k = 1) wins: indices [0, 3, 4].
    """
    return max_variance_subsets(rewards.reshape(1, -1), m)[0]


class PODS(RolloutFilter):
    """Per group, keep ``num_keep`` of its rollouts (among those still kept) by ``rule``.

    Args:
        num_keep: m, rollouts kept per group; groups with at most m kept rollouts are left as
            they are. Must be >= 2 (a single rollout has no variance) and <= the group size
            ``model.rollout.num_generations`` (checked at fit start). Paper default 16 with n = 64.
        rule: "max_variance" (the paper's method), "random" (uniform, seeded by (seed, step,
            prompt id)) or "max_reward" (the m highest rewards; ties keep generation order).
    """

    fixes_group_size = True  # G is read once at start-up (a batch controller may not change it)

    state_names = ("rollouts_dropped_total",)
    metric_names = ("rollouts_dropped", "rollouts_kept", "groups")

    def __init__(self, num_keep: int = 16, rule: str = "max_variance") -> None:
        super().__init__()
        if num_keep < 2:
            raise ValueError(
                f"PODS.num_keep must be >= 2 (a group of one rollout has no reward variance), got {num_keep}"
            )
        if rule not in RULES:
            raise ValueError(f"PODS.rule={rule!r} is unknown; choose one of {RULES}")
        self.num_keep = int(num_keep)
        self.rule = rule
        self.rollouts_dropped_total = 0

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"num_keep": self.num_keep, "rule": self.rule}

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        group_size = int(pl_module.group_size)
        if self.num_keep > group_size:
            raise ValueError(
                f"PODS.num_keep={self.num_keep} is larger than model.rollout.num_generations={group_size}: "
                f"PODS trains on m of the n rollouts of each prompt, so it needs m <= n. Set PODS.num_keep "
                f"to at most {group_size}, or raise model.rollout.num_generations to at least {self.num_keep} "
                f"(the paper uses n = 64, m = 16; n/m of 2-4 is recommended)."
            )

    @override
    def select_rollouts(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> torch.Tensor:
        keep_in = batch.keep.bool()
        step, seed = batch.context.step, batch.context.seed
        keep = select_per_group(batch.rewards, batch.prompt_index, keep_in, self.num_keep, self.rule, batch.pool.ids, seed, step)
        dropped = int(keep_in.sum()) - int(keep.sum())
        self.rollouts_dropped_total += dropped
        groups_in = int(torch.unique(batch.prompt_index[keep_in]).numel()) if len(batch) else 0
        self.set_metrics({"rollouts_dropped": float(dropped), "rollouts_kept": float(int(keep.sum())), "groups": float(groups_in)})
        return keep


def select_per_group(
    rewards: torch.Tensor,
    group: torch.Tensor,
    mask: torch.Tensor,
    m: int,
    rule: str,
    prompt_ids: torch.Tensor,
    seed: int = 0,
    step: int = 0,
) -> torch.Tensor:
    """[N] bool: ``mask`` narrowed to at most m rollouts per group, chosen by ``rule``.

    Args:
        rewards: [N] rewards. group: [N] pool index of each rollout. mask: [N] rollouts eligible.
        m: rollouts kept per group. rule: one of ``RULES``.
        prompt_ids: [P] stable prompt id per pool index (seeds the "random" rule).
    Groups are processed in buckets of equal size so the common case (all groups of size n)
    is one batched [K, n] computation.
    """
    keep = mask.clone()
    rows = torch.nonzero(mask).flatten()  # [R] eligible rollouts, generation order
    if len(rows) == 0:
        return keep
    g = group[rows]
    order = torch.argsort(g, stable=True)  # rows grouped by prompt, generation order inside
    rows = rows[order]
    uniq, counts = torch.unique_consecutive(g[order], return_counts=True)  # [K], [K]
    starts = torch.cumsum(counts, 0) - counts  # [K]
    keep[rows] = False  # re-admit the chosen rows below
    small = counts <= m
    if small.any():
        keep[rows[_expand_ranges(starts[small], counts[small])]] = True
    for n in torch.unique(counts[~small]).tolist():
        sel = counts == n
        block = rows[starts[sel].unsqueeze(1) + torch.arange(n)]  # [K_n, n] row ids, generation order
        if rule == "max_variance":
            cols = max_variance_subsets(rewards[block], m)  # [K_n, m]
        elif rule == "max_reward":
            ranked = torch.sort(rewards[block], dim=1, descending=True, stable=True).indices  # [K_n, n]
            cols = torch.sort(ranked[:, :m], dim=1).values
        else:  # random
            pids = prompt_ids[uniq[sel]].tolist()
            cols = torch.stack(
                [torch.randperm(n, generator=seeded_generator(seed, step, pid, "pods"))[:m] for pid in pids]
            ).sort(dim=1).values
        keep[block.gather(1, cols).flatten()] = True
    return keep


def _expand_ranges(starts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Concatenate arange(s, s + c) for each (s, c)."""
    total = int(counts.sum())
    offsets = torch.arange(total) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    return torch.repeat_interleave(starts, counts) + offsets
