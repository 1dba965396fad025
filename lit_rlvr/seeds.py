"""The core's seed recipe: every seed the trainer derives itself, in one documented function.

A derived seed is a weighted sum of named integer parts plus an offset, reduced modulo
2³¹ − 1 when it seeds an engine's sampling (engines take 31-bit seeds). Each use has its own
weights (``RECIPES``), which keep different uses, steps, rounds and ranks apart; they are
reproducible on resume because every part is (the run seed, the step, the round, the rank).
The values are those the trainer has always used, so runs reproduce theirs.

Selection methods derive their seeds with ``selection_toolkit.seed_value`` / ``seeded_generator``
(a hash of run seed, step, prompt id and salt); this module is for the core: the rollout loop,
pruning, evaluation, the vLLM engine and the module's refill draws.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

SAMPLING_MODULUS = 2**31 - 1
"""Engine sampling seeds are reduced modulo this (a 31-bit seed every engine accepts)."""


class Recipe(NamedTuple):
    weights: dict[str, int]
    """Part name -> its multiplier."""
    offset: int = 0
    modulus: Optional[int] = SAMPLING_MODULUS
    """None: not reduced (the value is a key or a seed that never grows past 2³¹)."""


RECIPES: dict[str, Recipe] = {
    # one rollout round's sampling seed: distinct per step, round and rank
    "round": Recipe({"seed": 1_000_003, "step": 10_007, "round": 101, "rank": 7919}),
    # a pruned round's continuation of its survivors: apart from the round's own seed
    "continuation": Recipe({"seed": 31}, offset=17),
    # held-out evaluation's sampled decoding: the run seed plus the validation batch index
    "evaluation": Recipe({"seed": 1, "batch": 1}, modulus=None),
    # the vLLM engine's own seed: one replica per rank
    "engine": Recipe({"seed": 1, "rank": 1}, modulus=None),
    # the vLLM engine's per-request seed: a sampling seed plus the samples before the request in its call
    "sample": Recipe({"seed": 1, "sample": 1}, modulus=None),
    # the module's refill draws (the data module's ``draw`` key): per step, rank and prompts used so far
    "draw": Recipe({"step": 4096 * 1_000_003, "rank": 1_000_003, "drawn": 1}, modulus=None),
    # GroupValueProbe's rollouts (the run seed its pools' context carries) and its candidate draw's key, per step:
    # apart from the training rounds' seeds and the refill draws' keys, so probing changes no training rollout
    "probe": Recipe({"seed": 1}, offset=2_654_435_761),
    "probe_draw": Recipe({"step": 1}, offset=1 << 62, modulus=None),
}


def derive_seed(use: str, **parts: int) -> int:
    """The seed for ``use`` (a key of ``RECIPES``) from its parts: Σ weight·part + offset (mod its modulus).

    Every part the recipe names must be given, and no other, so a caller cannot silently drop one.
    """
    recipe = RECIPES[use]
    if set(parts) != set(recipe.weights):
        raise TypeError(f"derive_seed({use!r}) takes the parts {sorted(recipe.weights)}, got {sorted(parts)}")
    value = sum(w * int(parts[name]) for name, w in recipe.weights.items()) + recipe.offset
    return value if recipe.modulus is None else value % recipe.modulus
