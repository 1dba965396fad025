"""A cosine k-nearest-neighbour index over prompt embeddings, keyed by prompt id (FAISS).

LEEPS (``callbacks/leeps.py``) asks it for each explore candidate's k nearest prompts.
Vectors are L2-normalised, so inner product is cosine similarity. FAISS holds the only
copy of the vectors (one row each); a flat ``PromptTable`` maps prompt id → row and
records the step each prompt was embedded at.

Updates are incremental, never a rebuild per step: a new prompt appends a row. A
refreshed prompt overwrites its row in place in the flat index (its storage is a plain
[R, D] array; a search filter would cost the flat index its BLAS path). HNSW cannot move
a node, so there a refreshed prompt appends a new row and the old one becomes *stale*,
excluded from searches by an ``IDSelectorBitmap`` until stale rows outnumber live ones
and the index is rebuilt from its live rows (amortised O(1) per update).

Cosine weights are recomputed in float64 numpy from the stored vectors for the
neighbours FAISS returns: the weights are then independent of FAISS's blocking and row
layout, identical on every rank and after a resume (which rebuilds a compacted index).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import numpy as np
import torch

from lit_rlvr.callbacks.state import PromptTable

__all__ = ["PromptIndex", "import_faiss"]

_FIX = "install it with `pip install faiss-cpu` (a lit-rlvr dependency; `faiss-gpu` works too)"


def import_faiss() -> Any:
    """``import faiss``, or an ImportError naming the cause and the fix."""
    try:
        import faiss
    except ImportError as err:  # pragma: no cover - exercised by monkeypatching sys.modules
        raise ImportError(f"LEEPS keeps its prompt index in FAISS, but `import faiss` failed ({err}): {_FIX}") from err
    return faiss


@contextlib.contextmanager
def _one_faiss_thread(faiss: Any) -> Iterator[None]:
    """HNSW insertion is order-dependent under OpenMP: build it on one thread so every rank builds the same graph."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def normalise(vectors: np.ndarray) -> np.ndarray:
    """[n, D] float32 rows scaled to unit L2 norm (all-zero rows stay zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)


class PromptIndex:
    """Exact (``IndexFlatIP``) or approximate (``IndexHNSWFlat``) cosine search over prompt ids.

    Args:
        kind: "flat" (exact inner product, the default) or "hnsw" (approximate, for large pools).
        hnsw_m: HNSW graph degree M.
        hnsw_ef_search: HNSW search breadth efSearch (larger: slower, closer to exact).
        hnsw_ef_construction: HNSW build breadth efConstruction.
        search_backend: who searches the flat index: "faiss" (``IndexFlatIP.search``, the default)
            or "torch" (an exact blocked matmul + topk over the same FAISS storage, no copy;
            about 10x faster than FAISS on the shared benchmark machine, docs/selection_overhead.md).
    """

    def __init__(
        self,
        kind: str = "flat",
        hnsw_m: int = 32,
        hnsw_ef_search: int = 64,
        hnsw_ef_construction: int = 40,
        search_backend: str = "faiss",
    ) -> None:
        if kind not in ("flat", "hnsw"):
            raise ValueError(f"LEEPS.index must be 'flat' (exact) or 'hnsw' (approximate), got {kind!r}")
        if search_backend not in ("faiss", "torch") or (search_backend == "torch" and kind != "flat"):
            raise ValueError(f"LEEPS.search_backend must be 'faiss', or 'torch' with index: flat; got {search_backend!r} with index: {kind}")
        self.search_backend = search_backend
        self.faiss = import_faiss()
        self.kind = kind
        self.hnsw_m, self.hnsw_ef_search, self.hnsw_ef_construction = int(hnsw_m), int(hnsw_ef_search), int(hnsw_ef_construction)
        self.dim: Optional[int] = None
        self.table = PromptTable({"row": (np.int64, -1), "embedded_step": (np.int64, -1)})
        self.row_ids = np.zeros(0, dtype=np.int64)
        """[R] prompt id of each FAISS row, −1 for a stale row."""
        self._index: Any = None

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        """Prompts embedded (live rows)."""
        return int((self.row_ids >= 0).sum())

    def embedded_step(self, ids: Any) -> np.ndarray:
        """[n] step each prompt id was last embedded at (−1: never)."""
        return self.table.get("embedded_step", np.asarray(ids, dtype=np.int64)).copy()

    def vectors(self, ids: Any) -> np.ndarray:
        """[n, D] float32 unit vectors of embedded prompt ids."""
        rows = self.table.get("row", np.asarray(ids, dtype=np.int64))
        if (rows < 0).any():
            raise KeyError("PromptIndex.vectors: some prompt ids are not embedded")
        return self._index.reconstruct_batch(rows) if len(rows) else np.zeros((0, self.dim or 0), np.float32)

    def search(self, ids: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest other prompts of each embedded prompt id in ``ids``.

        Returns (neighbour ids [Q, k] int64, −1 where fewer than k exist; cosine [Q, k]
        float64, recomputed exactly from the vectors, 0 where no neighbour).
        """
        ids = np.asarray(ids, dtype=np.int64)
        q = len(ids)
        out_ids = np.full((q, k), -1, dtype=np.int64)
        out_cos = np.zeros((q, k), dtype=np.float64)
        if q == 0 or k == 0 or self._index is None:
            return out_ids, out_cos
        query = self.vectors(ids)  # [Q, D]
        rows = self._nearest_rows(query, k + 1)  # [Q, k+1]; self is among them
        nbr = np.where(rows >= 0, self.row_ids[np.maximum(rows, 0)], -1)  # [Q, k+1] prompt ids
        nbr[nbr == ids[:, None]] = -1  # not its own neighbour
        # Keep the first k valid neighbours of each row, in FAISS's order.
        valid = nbr >= 0
        rank = np.cumsum(valid, axis=1) - 1  # [Q, k+1]
        take = valid & (rank < k)
        qi, ci = np.nonzero(take)
        out_ids[qi, rank[qi, ci]] = nbr[qi, ci]
        got = out_ids >= 0
        if got.any():
            nvec = self.vectors(out_ids[got]).astype(np.float64)  # [M, D]
            qvec = np.repeat(query.astype(np.float64), got.sum(axis=1), axis=0)  # [M, D]
            out_cos[got] = np.einsum("md,md->m", nvec, qvec)
        return out_ids, out_cos

    def _nearest_rows(self, query: np.ndarray, kk: int) -> np.ndarray:
        """[Q, kk] rows of the largest inner products with ``query`` [Q, D] (−1 pads), stale rows excluded."""
        if self.search_backend == "torch":
            return self._torch_nearest_rows(query, kk)
        params, keepalive = self._search_params(self.row_ids >= 0)
        _, rows = self._index.search(query, kk, params=params)
        del keepalive
        return rows

    def _torch_nearest_rows(self, query: np.ndarray, kk: int, block: int = 65536) -> np.ndarray:
        """Exact top-kk by blocked matmul over the flat index's storage (a flat index has no stale rows)."""
        base = torch.from_numpy(self._flat_rows())  # [R, D], shares FAISS's memory
        q = torch.from_numpy(np.ascontiguousarray(query, dtype=np.float32))  # [Q, D]
        best_s = torch.empty((len(q), 0))
        best_i = torch.empty((len(q), 0), dtype=torch.long)
        for start in range(0, len(base), block):
            scores = q @ base[start : start + block].T  # [Q, b]
            s, i = scores.topk(min(kk, scores.shape[1]), dim=1)
            best_s, pick = torch.cat([best_s, s], 1).topk(min(kk, best_s.shape[1] + s.shape[1]), dim=1)
            best_i = torch.cat([best_i, i + start], 1).gather(1, pick)
        rows = np.full((len(q), kk), -1, dtype=np.int64)
        rows[:, : best_i.shape[1]] = best_i.numpy()
        return rows

    # ------------------------------------------------------------------ updates

    def upsert(self, ids: Any, vectors: np.ndarray, step: int) -> None:
        """Add (or refresh) distinct prompt ids with [n, D] vectors (normalised here) embedded at ``step``."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return
        vectors = normalise(vectors)
        self._ensure_dim(vectors.shape[1])
        old = self.table.get("row", ids)
        self.table.set("embedded_step", ids, step)
        if self.kind == "flat":  # a flat index is a plain [R, D] array: refresh rows in place
            again = old >= 0
            self._flat_rows()[old[again]] = vectors[again]
            ids, vectors = ids[~again], vectors[~again]
        else:  # HNSW cannot move a node: refreshed prompts get a new row, the old one goes stale
            self.row_ids[old[old >= 0]] = -1
        start = len(self.row_ids)
        self._add(vectors)
        self.row_ids = np.concatenate([self.row_ids, ids])
        self.table.set("row", ids, np.arange(start, start + len(ids)))
        if (self.row_ids < 0).sum() > max(len(self), 1024):
            self._compact()

    def _flat_rows(self) -> np.ndarray:
        """[R, D] float32 view of the flat index's storage (writes go straight into the index)."""
        f, ix = self.faiss, self._index
        return f.rev_swig_ptr(ix.get_xb(), ix.ntotal * ix.d).reshape(ix.ntotal, ix.d)

    def _ensure_dim(self, dim: int) -> None:
        if self.dim is None:
            self.dim = int(dim)
            self._index = self._new_index()
        elif dim != self.dim:
            raise ValueError(f"PromptIndex holds {self.dim}-dimensional embeddings, got {dim}-dimensional ones")

    def _new_index(self) -> Any:
        f = self.faiss
        if self.kind == "flat":
            return f.IndexFlatIP(self.dim)
        index = f.IndexHNSWFlat(self.dim, self.hnsw_m, f.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = self.hnsw_ef_search
        index.hnsw.efConstruction = self.hnsw_ef_construction
        return index

    def _add(self, vectors: np.ndarray) -> None:
        if len(vectors) == 0:
            return
        if self.kind == "hnsw":
            with _one_faiss_thread(self.faiss):
                self._index.add(vectors)
        else:
            self._index.add(vectors)

    def _search_params(self, live: np.ndarray) -> tuple[Any, Any]:
        """FAISS search parameters excluding stale rows (None when there are none), and what must stay alive."""
        f = self.faiss
        if live.all():
            if self.kind == "hnsw":
                return f.SearchParametersHNSW(efSearch=self.hnsw_ef_search), None
            return None, None
        bitmap = np.packbits(live, bitorder="little")
        sel = f.IDSelectorBitmap(len(live), f.swig_ptr(bitmap))
        if self.kind == "hnsw":
            return f.SearchParametersHNSW(sel=sel, efSearch=self.hnsw_ef_search), (bitmap, sel)
        return f.SearchParameters(sel=sel), (bitmap, sel)

    def _compact(self) -> None:
        """Rebuild from the live rows, in row order."""
        live_rows = np.flatnonzero(self.row_ids >= 0)
        ids = self.row_ids[live_rows]
        vectors = self._index.reconstruct_batch(live_rows) if len(live_rows) else np.zeros((0, self.dim), np.float32)
        self._load(ids, vectors)

    def _load(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._index = self._new_index()
        if len(ids):
            self._add(np.ascontiguousarray(vectors, dtype=np.float32))
        self.row_ids = ids.astype(np.int64).copy()
        self.table.set("row", ids, np.arange(len(ids)))

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The live vectors in row order (4·D bytes a prompt) and each id's embedding step."""
        live_rows = np.flatnonzero(self.row_ids >= 0)
        vectors = self._index.reconstruct_batch(live_rows) if len(live_rows) else np.zeros((0, self.dim or 0), np.float32)
        return {
            "ids": torch.from_numpy(self.row_ids[live_rows].copy()),
            "vectors": torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)),
            "embedded_step": torch.from_numpy(self.table["embedded_step"].copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ids = np.asarray(torch.as_tensor(state.get("ids", torch.zeros(0, dtype=torch.long))).numpy(), dtype=np.int64)
        vectors = np.asarray(torch.as_tensor(state.get("vectors", torch.zeros(0, 0))).numpy(), dtype=np.float32)
        self.table = PromptTable({"row": (np.int64, -1), "embedded_step": (np.int64, -1)})
        if "embedded_step" in state:
            steps = torch.as_tensor(state["embedded_step"]).numpy()
            self.table.load_state_dict({"embedded_step": steps, "row": np.full(len(steps), -1)})
        self.dim = int(vectors.shape[1]) if len(ids) else None
        self._index = self._new_index() if self.dim else None
        self.row_ids = np.zeros(0, dtype=np.int64)
        if len(ids):
            self._load(ids, vectors)
