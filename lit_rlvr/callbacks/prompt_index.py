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

IVF (``kind="ivf"``) keeps that flat index as the source of truth and adds an
``IndexIVFFlat`` over the same rows (FAISS ids = rows): trained once when ``ivf_train_at``
prompts exist (exact search before), nlist = round(√N) unless set; a refreshed row is
``remove_ids`` + ``add_with_ids``; retrained (lists rebuilt) only when the index has grown
``ivf_regrow``-fold since training (amortised O(1) per update). nprobe = nlist is exact.

A neighbour cache (``cached_search``) keeps each prompt's k neighbour ids by prompt id,
computed the first time they are needed after the prompt is (re-)embedded, reused until it
is re-embedded or ``max_age`` steps old; cosines are recomputed from the current vectors
on every call. What goes stale: a prompt embedded (or re-embedded) after an entry was
computed is not among that entry's neighbours until the entry is recomputed (≤ max_age
steps later), and an entry keeps a neighbour whose refreshed vector moved away.

FAISS 1.15's flat search sends fewer than ``distance_compute_blas_threshold`` (default
128000) queries down a per-query scan of the whole index (memory-bound: 10 s for 160
queries at 100k × 576 on the benchmark machine); flat searches here (and IVF's coarse
quantizer) lower it to 1, the BLAS path (2.6 s there), for their duration.

Cosine weights are recomputed in float64 numpy from the stored vectors for the
neighbours FAISS returns: the weights are then independent of FAISS's blocking and row
layout, identical on every rank and after a resume (which rebuilds a compacted index).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Optional

import numpy as np
import torch

from lit_rlvr.selection_toolkit import PromptTable, require_keys

__all__ = ["PromptIndex", "check_index_state", "import_faiss"]

_COLUMNS = {"row": (np.int64, -1), "embedded_step": (np.int64, -1), "nbr_step": (np.int64, -1), "version": (np.int64, -1)}
"""Per prompt id: FAISS row, step embedded, step its cached neighbours were searched, upsert count when embedded."""

_STATE = ("ids", "vectors", "embedded_step")
"""Keys of every saved index (``PromptIndex.state_dict``) but the empty state of one never built."""
_STATE_IVF = ("ivf_centroids", "ivf_trained_at")
"""Keys of an IVF index once trained (absent before)."""
_STATE_CACHE = ("nbr_ids", "nbr_nbr", "nbr_cos", "nbr_at", "nbr_step", "version", "upserts")
"""Keys of the neighbour cache (``neighbour_cache: true``; absent without it: ``upserts`` is then 0)."""
_STATE_LEGACY = ("nbr",)
"""13f0cc5's cache (``nbr_ids``, ``nbr``, ``nbr_step``, without ``nbr_nbr``): not loaded, the cache is rebuilt."""


def check_index_state(owner: str, state: dict[str, Any]) -> None:
    """``require_keys`` for a saved ``PromptIndex``: every key of its layout (IVF and cache keys in
    whole groups, when present), none unknown; an empty state (an index never built) passes."""
    if not state:
        return
    required = [*_STATE, *(_STATE_IVF if "ivf_centroids" in state else ()), *(_STATE_CACHE if "nbr_nbr" in state else ())]
    require_keys(owner, state, required, optional=(*_STATE_IVF, *_STATE_CACHE, *_STATE_LEGACY))


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
    """HNSW insertion and k-means are order-dependent under OpenMP: run them on one thread so every rank builds the same index."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


@contextlib.contextmanager
def _blas_flat_search(faiss: Any) -> Iterator[None]:
    """Flat search by BLAS for any number of queries (FAISS 1.15 defaults to a per-query scan below 128000)."""
    before = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 1
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = before


def normalise(vectors: np.ndarray) -> np.ndarray:
    """[n, D] float32 rows scaled to unit L2 norm (all-zero rows stay zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)


class PromptIndex:
    """Exact (``IndexFlatIP``) or approximate (``IndexHNSWFlat``, ``IndexIVFFlat``) cosine search over prompt ids.

    Args:
        kind: "flat" (exact inner product, the default), "hnsw" or "ivf" (approximate, for large pools).
        hnsw_m: HNSW graph degree M.
        hnsw_ef_search: HNSW search breadth efSearch (larger: slower, closer to exact).
        hnsw_ef_construction: HNSW build breadth efConstruction.
        search_backend: who runs exact flat searches (the flat index, and IVF before it is trained):
            "faiss" (``IndexFlatIP.search``, the default) or "torch" (an exact blocked matmul + topk
            over the same FAISS storage, no copy; faster than FAISS on the benchmark machine).
        ivf_nlist: IVF lists (0: round(√N) at training time).
        ivf_nprobe: lists an IVF search visits (nprobe = nlist: exact).
        ivf_train_at: train the IVF once this many prompts are embedded (exact search before).
        ivf_regrow: retrain when the index has grown this many times since the last training.
    """

    def __init__(
        self,
        kind: str = "flat",
        hnsw_m: int = 32,
        hnsw_ef_search: int = 64,
        hnsw_ef_construction: int = 40,
        search_backend: str = "faiss",
        ivf_nlist: int = 0,
        ivf_nprobe: int = 8,
        ivf_train_at: int = 4096,
        ivf_regrow: float = 4.0,
    ) -> None:
        if kind not in ("flat", "hnsw", "ivf"):
            raise ValueError(f"LEEPS.index must be 'flat' (exact), 'hnsw' or 'ivf' (approximate), got {kind!r}")
        if search_backend not in ("faiss", "torch") or (search_backend == "torch" and kind == "hnsw"):
            raise ValueError(f"LEEPS.search_backend must be 'faiss', or 'torch' with index: flat or ivf; got {search_backend!r} with index: {kind}")
        if ivf_nlist < 0 or ivf_nprobe < 1 or ivf_train_at < 1 or ivf_regrow <= 1:
            raise ValueError(f"LEEPS IVF settings: ivf_nlist >= 0, ivf_nprobe >= 1, ivf_train_at >= 1, ivf_regrow > 1; got "
                             f"{ivf_nlist!r}, {ivf_nprobe!r}, {ivf_train_at!r}, {ivf_regrow!r}")
        self.search_backend = search_backend
        self.faiss = import_faiss()
        self.kind = kind
        self.hnsw_m, self.hnsw_ef_search, self.hnsw_ef_construction = int(hnsw_m), int(hnsw_ef_search), int(hnsw_ef_construction)
        self.ivf_nlist, self.ivf_nprobe, self.ivf_train_at, self.ivf_regrow = int(ivf_nlist), int(ivf_nprobe), int(ivf_train_at), float(ivf_regrow)
        self.dim: Optional[int] = None
        self.table = PromptTable(_COLUMNS)
        self.row_ids = np.zeros(0, dtype=np.int64)
        """[R] prompt id of each FAISS row, −1 for a stale row."""
        self._index: Any = None
        self._ivf: Any = None
        """The trained IndexIVFFlat over the flat index's rows (kind "ivf"), or None."""
        self._ivf_trained_at = 0
        self._nbr: Optional[PromptTable] = None
        """Neighbour cache by prompt id: "nbr" [k] ids (−1 pads), "cos" [k], "at" (``upserts`` when computed);
        valid where ``nbr_step`` >= 0."""
        self.upserts = 0
        """``upsert`` calls so far: orders embeddings against cache entries."""
        self.searched = 0
        """Prompts queried against the index so far (cache misses included, hits not)."""

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

    def search(self, ids: Any, k: int, among: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest other prompts of each embedded prompt id in ``ids`` (only prompt ids in
        ``among``, when given: an exact search over their rows for a flat index or an untrained IVF,
        a FAISS ID filter for HNSW and a trained IVF).

        Returns (neighbour ids [Q, k] int64, −1 where fewer than k exist; cosine [Q, k]
        float64, recomputed exactly from the vectors, 0 where no neighbour).
        """
        ids = np.asarray(ids, dtype=np.int64)
        out_ids = np.full((len(ids), k), -1, dtype=np.int64)
        if len(ids) == 0 or k == 0 or self._index is None:
            return out_ids, np.zeros((len(ids), k))
        query = self.vectors(ids)  # [Q, D]
        self.searched += len(ids)
        if among is None:
            rows = self._nearest_rows(query, k + 1)  # [Q, k+1]; self is among them
        else:
            rows = self._nearest_rows_among(query, k + 1, np.asarray(among, dtype=np.int64))
        nbr = np.where(rows >= 0, self.row_ids[np.maximum(rows, 0)], -1)  # [Q, k+1] prompt ids
        nbr[nbr == ids[:, None]] = -1  # not its own neighbour
        # Keep the first k valid neighbours of each row, in FAISS's order.
        valid = nbr >= 0
        rank = np.cumsum(valid, axis=1) - 1  # [Q, k+1]
        take = valid & (rank < k)
        qi, ci = np.nonzero(take)
        out_ids[qi, rank[qi, ci]] = nbr[qi, ci]
        return out_ids, self.cosines(ids, out_ids, query)

    def cached_search(self, ids: Any, k: int, step: int, max_age: int) -> tuple[np.ndarray, np.ndarray]:
        """``search`` through the neighbour cache: a prompt's neighbour ids are reused from the last
        search of it while it has not been re-embedded since and that search is < ``max_age`` steps
        old; cosines are cached too and recomputed where a neighbour was re-embedded since, so they
        are always those of the current vectors. Same return as ``search``."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._nbr is None or self._nbr["nbr"].shape[1:] != (k,):
            self._new_cache(k)
        when = self.table.get("nbr_step", ids)
        miss = (when < 0) | (step - when >= max_age)
        if miss.any():
            fresh, cos = self.search(ids[miss], k)
            self._nbr.set("nbr", ids[miss], fresh)
            self._nbr.set("cos", ids[miss], cos)
            self._nbr.set("at", ids[miss], self.upserts)
            self.table.set("nbr_step", ids[miss], step)
        out_ids, out_cos = self._nbr.get("nbr", ids).copy(), self._nbr.get("cos", ids).copy()
        moved = ((out_ids >= 0) & (self.table.get("version", np.maximum(out_ids, 0)) > self._nbr.get("at", ids)[:, None])).any(axis=1)
        if moved.any():  # a neighbour was re-embedded after the entry: its cosines are recomputed
            out_cos[moved] = self.cosines(ids[moved], out_ids[moved])
            self._nbr.set("cos", ids[moved], out_cos[moved])
            self._nbr.set("at", ids[moved], self.upserts)
        return out_ids, out_cos

    def _new_cache(self, k: int) -> None:
        self._nbr = PromptTable({"nbr": (np.int64, -1), "cos": (np.float64, 0.0), "at": (np.int64, -1)}, trailing={"nbr": (k,), "cos": (k,)})
        self.table.set("nbr_step", np.arange(len(self.table)), -1)

    def cosines(self, ids: np.ndarray, nbr: np.ndarray, query: Optional[np.ndarray] = None) -> np.ndarray:
        """[Q, k] float64 cosine of each prompt in ``ids`` to its neighbours ``nbr`` [Q, k] (0 where −1)."""
        got = nbr >= 0
        if not got.any():
            return np.zeros(nbr.shape, dtype=np.float64)
        query = self.vectors(ids) if query is None else query
        nvec = self.vectors(np.where(got, nbr, ids[:, None]).ravel()).reshape(*nbr.shape, -1)  # [Q, k, D]; pads: itself
        out = np.einsum("qkd,qd->qk", nvec.astype(np.float64), query.astype(np.float64))  # no [Q·k, D] repeat
        return np.where(got, out, 0.0)

    def _nearest_rows(self, query: np.ndarray, kk: int) -> np.ndarray:
        """[Q, kk] rows of the largest inner products with ``query`` [Q, D] (−1 pads), stale rows excluded."""
        if self._ivf is not None:
            params = self.faiss.SearchParametersIVF(nprobe=min(self.ivf_nprobe, self._ivf.nlist))
            with _blas_flat_search(self.faiss):  # the coarse quantizer is a flat search too
                return self._ivf.search(query, kk, params=params)[1]
        if self.search_backend == "torch":
            return self._torch_nearest_rows(query, kk)
        params, keepalive = self._search_params(self.row_ids >= 0)
        with _blas_flat_search(self.faiss):
            _, rows = self._index.search(query, kk, params=params)
        del keepalive
        return rows

    def _nearest_rows_among(self, query: np.ndarray, kk: int, among: np.ndarray) -> np.ndarray:
        """[Q, kk] rows of the largest inner products among the rows of prompt ids ``among`` (−1 pads)."""
        rows = self.table.get("row", among[(among >= 0) & (among < len(self.table))])
        rows = np.unique(rows[rows >= 0])
        rows = rows[self.row_ids[rows] >= 0]  # [H] live rows allowed
        if len(rows) == 0:
            return np.full((len(query), kk), -1, dtype=np.int64)
        if len(rows) == len(self):  # every live row allowed: the plain search
            return self._nearest_rows(query, kk)
        if self.kind == "flat" or self._ivf is None:  # exact: a matmul over the allowed rows only
            local = self._torch_nearest_rows(query, kk, base=self._index.reconstruct_batch(rows))
            return np.where(local >= 0, rows[np.maximum(local, 0)], -1)
        allowed = np.zeros(len(self.row_ids), dtype=bool)
        allowed[rows] = True
        params, keepalive = self._search_params(allowed, force=True)
        if self._ivf is not None:
            params = self.faiss.SearchParametersIVF(nprobe=min(self.ivf_nprobe, self._ivf.nlist), sel=params.sel)
            with _blas_flat_search(self.faiss):
                found = self._ivf.search(query, kk, params=params)[1]
        else:
            found = self._index.search(query, kk, params=params)[1]
        del keepalive
        return found

    def _torch_nearest_rows(self, query: np.ndarray, kk: int, block: int = 65536, base: Optional[np.ndarray] = None) -> np.ndarray:
        """Exact top-kk by blocked matmul over the flat index's storage (a flat index has no stale rows),
        or over ``base`` [H, D] (rows then index ``base``)."""
        base = torch.from_numpy(self._flat_rows() if base is None else np.ascontiguousarray(base, dtype=np.float32))  # [R, D]
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
        self.table.set("nbr_step", ids, -1)  # its cached neighbours were of its old vector
        self.upserts += 1
        self.table.set("version", ids, self.upserts)
        if self.kind != "hnsw":  # a flat index is a plain [R, D] array: refresh rows in place
            again = old >= 0
            self._flat_rows()[old[again]] = vectors[again]
            if self._ivf is not None and again.any():
                rows = np.ascontiguousarray(old[again])
                self._ivf.remove_ids(self.faiss.IDSelectorArray(len(rows), self.faiss.swig_ptr(rows)))
                self._ivf.add_with_ids(vectors[again], rows)
            ids, vectors = ids[~again], vectors[~again]
        else:  # HNSW cannot move a node: refreshed prompts get a new row, the old one goes stale
            self.row_ids[old[old >= 0]] = -1
        start = len(self.row_ids)
        self._add(vectors)
        self.row_ids = np.concatenate([self.row_ids, ids])
        self.table.set("row", ids, np.arange(start, start + len(ids)))
        if self._ivf is not None and len(ids):
            self._ivf.add_with_ids(vectors, np.arange(start, start + len(ids)))
        if (self.row_ids < 0).sum() > max(len(self), 1024):
            self._compact()
        if self.kind == "ivf" and len(self) >= max(self.ivf_train_at, self.ivf_regrow * self._ivf_trained_at, 1):
            self._train_ivf()

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
        if self.kind != "hnsw":
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

    def _train_ivf(self, centroids: Optional[np.ndarray] = None) -> None:
        """(Re)build the IVF over every row: k-means on the live vectors (or the given centroids), then all rows added."""
        f, n = self.faiss, len(self)
        nlist = len(centroids) if centroids is not None else max(1, min(self.ivf_nlist or round(math.sqrt(n)), n))
        quantizer = f.IndexFlatIP(self.dim)
        ivf = f.IndexIVFFlat(quantizer, self.dim, nlist, f.METRIC_INNER_PRODUCT)
        ivf.cp.max_points_per_centroid = 64  # k-means on ≤ 64·nlist sampled vectors
        with _one_faiss_thread(f):
            if centroids is None:
                ivf.train(self._flat_rows())
            else:
                quantizer.add(np.ascontiguousarray(centroids, dtype=np.float32))
                ivf.is_trained = True
        ivf.set_direct_map_type(f.DirectMap.Hashtable)  # remove_ids without scanning every list
        ivf.add_with_ids(self._flat_rows(), np.arange(len(self.row_ids), dtype=np.int64))
        self._ivf, self._ivf_quantizer, self._ivf_trained_at = ivf, quantizer, n

    def _search_params(self, live: np.ndarray, force: bool = False) -> tuple[Any, Any]:
        """FAISS search parameters excluding rows not ``live`` (None when there are none, unless
        ``force``), and what must stay alive."""
        f = self.faiss
        if live.all() and not force:
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
        """The live vectors in row order (4·D bytes a prompt), each id's embedding step, the IVF
        centroids and size at training, and the neighbour cache (8·k bytes a cached prompt)."""
        live_rows = np.flatnonzero(self.row_ids >= 0)
        vectors = self._index.reconstruct_batch(live_rows) if len(live_rows) else np.zeros((0, self.dim or 0), np.float32)
        state = {
            "ids": torch.from_numpy(self.row_ids[live_rows].copy()),
            "vectors": torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)),
            "embedded_step": torch.from_numpy(self.table["embedded_step"].copy()),
        }
        if self._ivf is not None:
            q = self._ivf.quantizer
            state["ivf_centroids"] = torch.from_numpy(q.reconstruct_n(0, q.ntotal).copy())
            state["ivf_trained_at"] = torch.tensor(self._ivf_trained_at)
        if self._nbr is not None:
            cached = np.flatnonzero(self.table["nbr_step"] >= 0)
            state["nbr_ids"] = torch.from_numpy(cached)
            state.update({f"nbr_{c}": torch.from_numpy(self._nbr.get(c, cached).copy()) for c in ("nbr", "cos", "at")})
            state["nbr_step"] = torch.from_numpy(self.table["nbr_step"][cached].copy())
            state["version"] = torch.from_numpy(self.table["version"].copy())
            state["upserts"] = torch.tensor(self.upserts)
        return state

    def load_state_dict(self, state: dict[str, Any], owner: str = "PromptIndex") -> None:
        """A state of ``state_dict`` (``check_index_state``), or the empty one of an index never built."""
        check_index_state(owner, state)
        ids = np.asarray(torch.as_tensor(state["ids"] if state else torch.zeros(0, dtype=torch.long)).numpy(), dtype=np.int64)
        vectors = np.asarray(torch.as_tensor(state["vectors"] if state else torch.zeros(0, 0)).numpy(), dtype=np.float32)
        self.table = PromptTable(_COLUMNS)
        if state:
            steps = torch.as_tensor(state["embedded_step"]).numpy()
            self.table.load_state_dict({"embedded_step": steps, "row": np.full(len(steps), -1), "nbr_step": np.full(len(steps), -1),
                                        "version": np.full(len(steps), -1)})
        self.dim = int(vectors.shape[1]) if len(ids) else None
        self._index = self._new_index() if self.dim else None
        self.row_ids = np.zeros(0, dtype=np.int64)
        self._ivf, self._ivf_trained_at, self._nbr = None, 0, None
        if len(ids):
            self._load(ids, vectors)
        if "ivf_centroids" in state and self.kind == "ivf" and len(ids):
            self._train_ivf(torch.as_tensor(state["ivf_centroids"]).numpy())
            self._ivf_trained_at = int(state["ivf_trained_at"])
        self.upserts = int(state.get("upserts", 0))  # optional: saved with the neighbour cache only
        if "nbr_nbr" in state:
            self._new_cache(int(state["nbr_nbr"].shape[1]))
            version = torch.as_tensor(state["version"]).numpy()
            self.table.set("version", np.arange(len(version)), version)
            cached = torch.as_tensor(state["nbr_ids"]).numpy()
            for c in ("nbr", "cos", "at"):
                self._nbr.set(c, cached, torch.as_tensor(state[f"nbr_{c}"]).numpy())
            self.table.set("nbr_step", cached, torch.as_tensor(state["nbr_step"]).numpy())
