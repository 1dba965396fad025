"""Per-prompt selector state in flat arrays indexed by prompt id.

A million prompts cost a few megabytes per column, and a step's lookups are
vectorised numpy indexing (docs/architecture.md, "Scale"). Columns grow on demand as
larger prompt ids appear, so selectors need not know the dataset size.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import torch


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
            "(lit_rlvr.callbacks.state.require_keys)"
        )


def selector_name(selector: Any) -> str:
    """``"GRESO (state key 'GRESO{...}')"``: how ``require_keys`` names a selector."""
    return f"{type(selector).__name__} (state key {selector.state_key!r})"


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


class TableHistory:
    """Checkpoint state and metrics of a selector whose history is a ``PromptTable`` (``self.table``),
    with an update count (``self.updates``) and its last step's metrics (``self._metrics``).

    List it before the Lightning callback base, so these methods are the ones used: MoPPS, DPS.
    """

    table: PromptTable
    updates: int
    _metrics: dict[str, float]

    def state_dict(self) -> dict[str, Any]:
        return {"table": table_state(self.table), "updates": self.updates}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        owner = selector_name(self)
        require_keys(owner, state_dict, ("table", "updates"))
        self.table.load_state_dict(state_dict["table"], f"{owner} table")
        self.updates = int(state_dict["updates"])

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)
