"""The selector toolkit: every helper a selection method shares with the others, in one place.

A method imports its stage base from ``lit_rlvr.selection`` (which re-exports these names too) and
takes what it needs from here; no method imports another method's file. Sections:

* ranks and seeds: ``seed_value`` / ``seeded_generator`` (the one seed recipe), ``gather_rows``
  (every rank's observations, so every rank updates the same state), ``group_observations``;
* choosing B of the pool: ``top_positions``, ``keep_only``, ``keep_top``;
* per-prompt history: ``PromptTable``, flat columns indexed by prompt id (docs/architecture.md, "Scale");
* success posteriors: ``group_success``, ``merge_rows``, ``beta_update``, ``beta_thompson``
  (MoPPS, DPS, SARA);
* strict state: ``require_keys``, ``save_value`` / ``load_value``, with which
  ``SelectionCallback.state_dict`` / ``load_state_dict`` save and restore a method's ``state_names``.

It sits at the bottom of the layers beside the contract: it imports only ``lit_rlvr.types`` and
``lit_rlvr.advantages``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pickle
from typing import Any, Iterable, Mapping, Optional

import lightning.pytorch as pl
import numpy as np
import torch

from lit_rlvr.advantages import REWARD_TOL, is_zero_variance
from lit_rlvr.types import PromptPool, RolloutBatch

__all__ = [
    "PromptTable",
    "beta_thompson",
    "beta_update",
    "data_epoch",
    "data_order_generator",
    "gather_objects",
    "gather_rows",
    "group_observations",
    "group_success",
    "keep_only",
    "keep_top",
    "load_value",
    "merge_rows",
    "require_keys",
    "save_value",
    "seed_value",
    "seeded_generator",
    "seeded_uniform",
    "selector_name",
    "table_state",
    "top_positions",
    "warn_if_pool_is_batch_sized",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- ranks and seeds


def warn_if_pool_is_batch_sized(trainer: Optional[pl.Trainer], selector: str, advice: str) -> None:
    """Warn when ``data.pool_multiple`` <= 1: a selector choosing B of the pool would keep every prompt."""
    dm = getattr(trainer, "datamodule", None) if trainer is not None else None
    multiple = getattr(dm, "pool_multiple", None)
    if multiple is not None and multiple <= 1.0:
        log.warning(
            "%s selects B prompts from a candidate pool of data.pool_multiple × B, but data.pool_multiple = %s: "
            "it will keep every prompt (%s).",
            selector,
            multiple,
            advice,
        )


def data_epoch(trainer: Optional[pl.Trainer], step: int) -> Optional[int]:
    """The data epoch training step ``step`` drew its pool from (``datamodule.epoch_of``), or None
    when there is no datamodule that knows (a hand-made trainer in a test, the simulator's)."""
    epoch_of = getattr(getattr(trainer, "datamodule", None), "epoch_of", None)
    if not callable(epoch_of):
        return None
    try:
        return int(epoch_of(step))
    except (ValueError, ZeroDivisionError, TypeError, AttributeError):
        return None


def seed_value(seed: int, step: int, prompt_id: int = -1, salt: str = "") -> int:
    """The one seed-derivation recipe: a 63-bit seed from (run seed, step, prompt id, salt), by blake2b.

    Identical on every rank and on resume; a distinct ``salt`` per use keeps streams apart.
    ``seeded_generator`` seeds a generator with it; OC-GRPO's sampling seeds are it mod 2³¹ − 1.
    """
    digest = hashlib.blake2b(f"{seed}|{step}|{prompt_id}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def seeded_generator(seed: int, step: int, prompt_id: int = -1, salt: str = "") -> torch.Generator:
    """A CPU generator seeded by ``seed_value(seed, step, prompt id, salt)``: identical on every rank and on resume."""
    gen = torch.Generator()
    gen.manual_seed(seed_value(seed, step, prompt_id, salt))
    return gen


_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    z = z ^ (z >> _U64(30))
    z = z * _MIX1
    z = z ^ (z >> _U64(27))
    z = z * _MIX2
    return z ^ (z >> _U64(31))


def seeded_uniform(seed: int, step: int, prompt_ids: Any, salt: str = "") -> np.ndarray:
    """[n] float64 uniforms in [0, 1), one per prompt id: a pure function of (seed, step, id, salt).

    The key comes from ``seeded_generator(seed, step, -1, salt)``; each id is mixed with it by
    splitmix64, so the draw for a prompt does not depend on which other prompts are drawn
    with it (nor their order), on any rank, before or after a resume.
    """
    gen = seeded_generator(seed, step, -1, salt)
    key = _U64(int(torch.randint(0, 2**62, (1,), generator=gen)))
    ids = np.asarray(prompt_ids, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = _splitmix64(ids * _GOLDEN + key)
        z = _splitmix64(z ^ key)
    return (z >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))


def data_order_generator(*parts: int) -> torch.Generator:
    """A CPU generator for the data order, seeded from non-negative ints (the run seed, a salt, an epoch or key).

    A legacy recipe kept beside ``seed_value``: numpy's ``SeedSequence`` over ``parts``, the top 63
    bits of its first word. The data module's epoch permutations and draws and G2D's pair order use
    it; moving them to ``seed_value`` would reshuffle every run's prompt pools, so they keep it.
    """
    state = np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state >> np.uint64(1)))


def gather_rows(trainer: Optional[pl.Trainer], rows: torch.Tensor) -> torch.Tensor:
    """Concatenate a [K, D] tensor from every rank (K may differ per rank), in rank order.

    Selectors call this on their observations before updating state so every rank
    updates with the same data. Single process: returns ``rows`` unchanged.
    """
    if trainer is None or trainer.world_size <= 1:
        return rows
    strategy = trainer.strategy
    k = torch.tensor([rows.shape[0]], dtype=torch.long)
    sizes = strategy.all_gather(k).view(-1).tolist()  # [world]
    padded = torch.zeros((max(sizes), *rows.shape[1:]), dtype=rows.dtype)
    padded[: rows.shape[0]] = rows
    gathered = strategy.all_gather(padded.to(strategy.root_device)).cpu()  # [world, K_max, D]
    return torch.cat([gathered[r, : sizes[r]] for r in range(len(sizes))], dim=0)


def gather_objects(trainer: Optional[pl.Trainer], obj: Any) -> list[Any]:
    """``obj`` from every rank, in rank order (pickled through ``gather_rows``); one process: ``[obj]``.

    For state that is not a table of numbers (Pilot-Commit's buffer events). Only this run's own ranks' bytes
    are unpickled."""
    data = pickle.dumps(obj)
    blob = bytearray(len(data).to_bytes(8, "little") + data)
    rows = torch.frombuffer(blob, dtype=torch.uint8).view(-1, 1)
    raw = gather_rows(trainer, rows).view(-1).numpy().tobytes()
    out, i = [], 0
    while i < len(raw):
        n = int.from_bytes(raw[i : i + 8], "little")
        out.append(pickle.loads(raw[i + 8 : i + 8 + n]))  # this run's own ranks' bytes
        i += 8 + n
    return out


def group_observations(batch: RolloutBatch, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[K, 4] float64 rows (prompt id, n rollouts, reward sum, zero-variance) per group, by pool index.

    The last column is 1.0 where the group is zero-variance (``is_zero_variance(max − min)``).

    The compact per-group summary most selectors update from; ``gather_rows`` it across ranks.
    Vectorised (scatter reductions): milliseconds for hundreds of thousands of rollouts.
    """
    rows = torch.arange(len(batch)) if mask is None else torch.nonzero(mask).flatten()
    p = batch.prompt_index[rows]  # [n]
    r = batch.rewards[rows].double()  # [n]
    uniq, inv = torch.unique(p, return_inverse=True)  # [K] sorted pool indices, [n]
    k = len(uniq)
    n = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))  # [K]
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, r)  # [K]
    lo = torch.full((k,), float("inf"), dtype=torch.float64).scatter_reduce(0, inv, r, "amin")  # [K]
    hi = torch.full((k,), float("-inf"), dtype=torch.float64).scatter_reduce(0, inv, r, "amax")  # [K]
    return torch.stack([batch.pool.ids[uniq].double(), n, total, is_zero_variance(hi - lo).double()], dim=1).reshape(-1, 4)


# --------------------------------------------------------------------------- choosing B of the pool


def top_positions(scores: Any, k: int, largest: bool = True) -> np.ndarray:
    """[min(k, n)] positions of the k largest (``largest=False``: smallest) of ``scores`` [n], best
    first; ties keep their order in ``scores`` (a stable sort: pool order, the same on every rank)."""
    scores = np.asarray(scores)
    return np.argsort(-scores if largest else scores, kind="stable")[:k]


def keep_only(pool: PromptPool, eligible: np.ndarray, picks: np.ndarray) -> None:
    """Narrow ``pool.keep`` to the pool indices ``eligible[picks]`` (``picks``: positions in ``eligible``).

    Nothing changes when the pool has at most B eligible candidates: every one of them is kept.
    """
    if len(eligible) > pool.batch_size:
        keep = torch.zeros(len(pool), dtype=torch.bool)
        keep[torch.from_numpy(eligible[picks])] = True
        pool.keep &= keep


def keep_top(pool: PromptPool, eligible: np.ndarray, scores: Any, largest: bool = True) -> np.ndarray:
    """The pre-rollout tail of a selector ranking the eligible candidates: keep the B (``pool.batch_size``)
    with the largest ``scores`` [E] (one per entry of ``eligible``; ``largest=False``: the smallest) and
    return their positions in ``eligible``, best first (``top_positions``, ``keep_only``)."""
    order = top_positions(scores, pool.batch_size, largest)
    keep_only(pool, eligible, order)
    return order


# --------------------------------------------------------------------------- per-prompt history


class PromptTable:
    """Named columns of per-prompt values: ``table["z_easy"][ids]``.

    Args:
        columns: column name -> (dtype, fill value for prompts not seen yet).
        trailing: column name -> extra trailing shape (e.g. (3, 3) for DPS's Dirichlet counts).
    """

    def __init__(self, columns: dict[str, tuple[Any, float]], trailing: dict[str, tuple[int, ...]] | None = None) -> None:
        self._spec = dict(columns)
        self._trailing = dict(trailing or {})
        self._data: dict[str, np.ndarray] = {
            name: np.full((0, *self._trailing.get(name, ())), fill, dtype=dtype) for name, (dtype, fill) in self._spec.items()
        }

    def __len__(self) -> int:
        return next(iter(self._data.values())).shape[0] if self._data else 0

    def ensure(self, max_id: int) -> None:
        """Grow every column to hold ids 0..max_id (amortised doubling)."""
        n = len(self)
        if max_id < n:
            return
        new_n = max(max_id + 1, 2 * n, 1024)
        for name, (dtype, fill) in self._spec.items():
            grown = np.full((new_n, *self._trailing.get(name, ())), fill, dtype=dtype)
            grown[:n] = self._data[name]
            self._data[name] = grown

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[name]

    def get(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Values of ``name`` at ``ids`` (fill values for ids never seen)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size:
            self.ensure(int(ids.max()))
        return self._data[name][ids]

    def set(self, name: str, ids: np.ndarray, values: Any) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size:
            self.ensure(int(ids.max()))
        self._data[name][ids] = values

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: arr.copy() for name, arr in self._data.items()}

    def load_state_dict(self, state: dict[str, Any], owner: str = "PromptTable") -> None:
        """Every column, and no other (``require_keys``; ``owner`` names the table in the error)."""
        require_keys(owner, state, self._spec)
        for name in self._spec:
            self._data[name] = np.array(state[name], dtype=self._spec[name][0])


def table_state(table: PromptTable) -> dict[str, torch.Tensor]:
    """A PromptTable's columns as tensors (safe under ``torch.load(weights_only=True)``)."""
    return {k: torch.from_numpy(v) for k, v in table.state_dict().items()}


# --------------------------------------------------------------------------- success posteriors


def group_success(batch: RolloutBatch, success_threshold: Optional[float]) -> torch.Tensor:
    """[K, 3] float64 rows (prompt id, n rollouts, successes) per rolled-out prompt of ``batch``.

    A rollout succeeds when its reward is ≥ ``success_threshold`` − ``REWARD_TOL``; with
    ``None`` each rollout contributes its reward clipped to [0, 1] (fractional successes).
    """
    if success_threshold is None:
        success = batch.rewards.double().clamp(0.0, 1.0)
    else:
        success = (batch.rewards.double() >= success_threshold - REWARD_TOL).double()
    obs = group_observations(dataclasses.replace(batch, rewards=success))  # [K, 4] (id, n, sum, zero-variance)
    return obs[:, :3]


def merge_rows(rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum the (n, successes) of rows that share a prompt id: (ids [U] int64, n [U], successes [U])."""
    arr = rows.double().numpy().reshape(-1, 3)
    ids, inverse = np.unique(arr[:, 0].astype(np.int64), return_inverse=True)
    n = np.zeros(len(ids))
    succ = np.zeros(len(ids))
    np.add.at(n, inverse, arr[:, 1])
    np.add.at(succ, inverse, arr[:, 2])
    return ids, n, succ


def beta_update(
    alpha: np.ndarray, beta: np.ndarray, n: np.ndarray, successes: np.ndarray, decay: float, prior_alpha: float, prior_beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """A Beta posterior after ``successes`` of ``n``, the old one weighted by λ = ``decay``:
    α ← λα + (1−λ)α0 + s,  β ← λβ + (1−λ)β0 + (n − s)  (MoPPS; SARA's persisted posteriors)."""
    lam = decay
    return lam * alpha + (1 - lam) * prior_alpha + successes, lam * beta + (1 - lam) * prior_beta + (n - successes)


def beta_thompson(alpha: np.ndarray, beta: np.ndarray, ids: np.ndarray, seed: int, step: int, salt: str) -> np.ndarray:
    """[K] r̂ ~ Beta(alpha, beta), each drawn from ``seeded_generator(seed, step, id, salt)`` (two Gamma draws)."""
    out = np.empty(len(ids))
    for k, pid in enumerate(ids.tolist()):
        g = seeded_generator(seed, step, int(pid), salt)
        x = torch._standard_gamma(torch.tensor([alpha[k], beta[k]], dtype=torch.float64), generator=g)
        total = float(x.sum())
        out[k] = float(x[0]) / total if total > 0 else 0.5
    return out


# --------------------------------------------------------------------------- strict state


def require_keys(owner: str, state: Mapping[str, Any], required: Iterable[str], optional: Iterable[str] = ()) -> None:
    """Fail when a checkpoint's selector state lacks a ``required`` key or holds one neither required nor ``optional``.

    A tolerant load would resume a renamed key with default state and say nothing; this says which
    state (``owner``: the selector's name and ``state_key``, or one of its parts), which key, and the
    keys the checkpoint has. Keys a later version added are ``optional``, each with its default
    documented where it is loaded. To start a selector fresh on a checkpoint written with another
    layout, delete its entry from the checkpoint's ``"callbacks"`` (``torch.load`` the file,
    ``del ckpt["callbacks"][state_key]``, ``torch.save``): Lightning then leaves it at its initial state.
    """
    required = list(required)
    known = set(required) | set(optional)
    missing = [k for k in required if k not in state]
    unknown = sorted((str(k) for k in state if k not in known))
    if missing or unknown:
        what = ", ".join(([f"no key {k!r}" for k in missing]) + [f"an unknown key {k!r}" for k in unknown])
        raise ValueError(
            f"{owner}: the checkpoint's state has {what} (the checkpoint has "
            f"{sorted(str(k) for k in state)}, this version reads {sorted(known)}). Resume with the version that "
            "wrote it, or start this selector fresh: delete its entry from the checkpoint's \"callbacks\" "
            "(lit_rlvr.selection_toolkit.require_keys)"
        )


def selector_name(selector: Any) -> str:
    """``"GRESO (state key 'GRESO{...}')"``: how ``require_keys`` names a selector."""
    return f"{type(selector).__name__} (state key {selector.state_key!r})"


def save_value(value: Any) -> Any:
    """One ``state_names`` entry as the checkpoint holds it (safe under ``torch.load(weights_only=True)``).

    A ``PromptTable`` becomes its columns as tensors, a numpy array a tensor, an object with a
    ``state_dict`` its state dict, a dict of counters a copy; a number is saved as it is.
    """
    if isinstance(value, PromptTable):
        return table_state(value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if hasattr(value, "state_dict"):
        return value.state_dict()
    if isinstance(value, dict):
        return dict(value)
    return value


def load_value(current: Any, saved: Any, owner: str) -> Any:
    """The value to restore for one ``state_names`` entry, shaped like ``current`` (its initial value).

    A table or an object with ``load_state_dict`` loads in place (strictly; ``owner`` names it in
    errors), an array keeps its dtype, a dict of counters must have exactly its keys (each cast to
    the type it starts with), a number is cast to its type.
    """
    if isinstance(current, PromptTable) or hasattr(current, "load_state_dict"):
        current.load_state_dict(saved, owner)
        return current
    if isinstance(current, np.ndarray):
        return np.asarray(saved, dtype=current.dtype).copy()
    if isinstance(current, dict):
        require_keys(owner, saved, current)
        return {k: type(v)(saved[k]) for k, v in current.items()}
    if isinstance(current, (bool, int, float)):
        return type(current)(saved)
    return saved
