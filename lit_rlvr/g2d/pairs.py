"""Pair rules: which scored candidates of one prompt become (chosen, rejected) pairs (G2D stage 2).

G2D (arXiv 2605.21266) samples n candidates per prompt from the warm-up policy; a
prompt whose candidates are all correct or all wrong gives no pair, and a mixed
prompt gives chosen = a correct candidate, rejected = an incorrect one. Which
correct and which incorrect candidate the paper takes is not published
(docs/methods.md: "pair rule partly unconfirmed"), so the rule is a parameter, given
by import path like any other lit-rlvr component (``HarvestModule.pair_rule``):

- ``random_pairs`` (default): correct and incorrect candidates drawn uniformly
  at random, without replacement, from a generator seeded by (seed, prompt id):
  no preference beyond correctness, reproducible.
- ``extreme_pairs``: the correct candidates with the highest total reward against
  the incorrect ones with the lowest (ties by candidate order). With a binary
  accuracy reward alone it is "first correct vs first wrong"; with extra rewards
  (format, length) it picks the widest reward gap.

Every rule uses each candidate at most once, so a prompt gives at most
min(#correct, #wrong, pairs_per_prompt) pairs. The default of 1 pair per mixed
prompt is docs/methods.md's; it weights every informative prompt equally (a prompt
solved 4 of 8 times could otherwise give up to 16 pairs and dominate the set),
and the paper finds the warm-up length K, not the pair count, is what matters.

A rule is ``rule(correct [n] bool, rewards [n] float, pairs_per_prompt, generator)
-> list of (chosen index, rejected index)``.
"""

from __future__ import annotations

from typing import Callable

import torch

PairRule = Callable[[torch.Tensor, torch.Tensor, int, torch.Generator], list[tuple[int, int]]]


def _split(correct: torch.Tensor, pairs_per_prompt: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Indices of the correct and the incorrect candidates ([c], [w] int64) and how many pairs they make."""
    correct = correct.to(torch.bool)
    good, bad = torch.nonzero(correct).flatten(), torch.nonzero(~correct).flatten()
    return good, bad, min(pairs_per_prompt, len(good), len(bad))


def random_pairs(
    correct: torch.Tensor, rewards: torch.Tensor, pairs_per_prompt: int, generator: torch.Generator
) -> list[tuple[int, int]]:
    """Uniformly drawn correct (chosen) and incorrect (rejected) candidates, each used once."""
    good, bad, k = _split(correct, pairs_per_prompt)
    if k == 0:
        return []
    good = good[torch.randperm(len(good), generator=generator)[:k]]  # [k]
    bad = bad[torch.randperm(len(bad), generator=generator)[:k]]  # [k]
    return list(zip(good.tolist(), bad.tolist()))


def extreme_pairs(
    correct: torch.Tensor, rewards: torch.Tensor, pairs_per_prompt: int, generator: torch.Generator
) -> list[tuple[int, int]]:
    """Highest-reward correct candidates against lowest-reward incorrect ones, each used once."""
    good, bad, k = _split(correct, pairs_per_prompt)
    if k == 0:
        return []
    r = rewards.double()
    good = good[torch.argsort(-r[good], stable=True)[:k]]  # [k] best first
    bad = bad[torch.argsort(r[bad], stable=True)[:k]]  # [k] worst first
    return list(zip(good.tolist(), bad.tolist()))
