"""LEEPS: Latent-Guided Explore-Exploit Prompt Sampling (arXiv 2607.28077; code not public).

Pre-rollout selection of B prompts from the step's candidate pool (``data.pool_multiple``·B):

* **Portfolios.** *Exploit*: candidates whose most recent group had reward variance
  (non-zero-variance, the shared rule ``advantages.zero_variance_groups``). *Explore*:
  every other candidate (no history yet, or last group saturated: all equal rewards).
* **Slots.** B splits in proportion to each portfolio's moving-average *non-trivial
  ratio* (share of its groups with reward variance over the last ``window`` steps; 0.5
  before it has any groups), each portfolio at least ⌈floor·B⌉; slots a portfolio
  cannot fill (too few candidates) go to the other.
* **Exploit** slots take the candidates with the largest last-group reward variance
  (``exploit_rank``: "variance"; "p_hat": own posterior mean nearest 0.5; "random": a seeded draw).
* **Explore** slots take the candidates with the largest p̂(1 − p̂), p̂ nearest 0.5:

      q  = Σ_j w_j s_j / Σ_j w_j        w_j = max(cos(x, x_j), 0) over neighbours j with
                                        history; s_j their last group's success rate
      p̂ = (α + κ q) / (α + β + κ)       α, β the prompt's own Beta posterior (prior 1, 1);
                                        κ = ``neighbour_strength`` if Σ w_j > 0, else 0

  i.e. the neighbour estimate enters the prompt's posterior as κ pseudo-rollouts; a
  prompt's own rollouts outweigh it as they accumulate. Which neighbours (``neighbours``):
  "nearest" (default) takes the k nearest prompts and skips those without history;
  "nearest_with_history" takes the k nearest among the prompts that have history (the two
  readings of the paper; they differ while few prompts have history).
* **Embeddings** (``callbacks/embedding.py``): the policy's last-layer hidden state at the
  final prompt token, for candidates never embedded or embedded ≥ R steps ago, in batched
  no-grad forwards; or the offline MiniLM (``encoder: minilm``, embedded once). ``refresh``:
  "candidates" (default) re-embeds only the step's stale candidates, so other prompts' older
  vectors still serve as neighbours; "all" also re-embeds every indexed prompt every R steps
  (prompts from ``trainer.datamodule``); costs in docs/leeps.md.
* **Index** (``callbacks/prompt_index.py``): FAISS ``IndexFlatIP`` over L2-normalised
  vectors (exact cosine), ``index: ivf`` or ``hnsw`` (approximate) for large pools,
  ``search_backend: torch`` to search exactly by a torch matmul; updated incrementally.
* **Neighbour cache** (``neighbour_cache: true``, off by default): a prompt's k neighbour ids
  are reused from its last search until it is re-embedded or R steps old, so a step searches
  only the explore candidates (re-)embedded since; q still uses the neighbours' current last
  group and current cosines. Stale: a prompt embedded after an entry was computed is not a
  neighbour in it until it is recomputed (≤ R steps). Off by default: the paper's "k nearest
  neighbours" are those of the index as it is at the step.

Choices the paper leaves open, each a constructor argument (docs/methods.md, "unconfirmed"):
k = 16, R = 50, window = 10 steps, floor = 0.1·B (rounded up), the layer (−1), the
blend (κ = 4 pseudo-rollouts), "recent success" = the neighbour's last group, the
moving average as pooled counts over the window, a rollout succeeds when its reward is
≥ ``success_threshold`` (1.0), no posterior decay (λ = 1). Ties keep pool order.

Ranks agree: every rank embeds (FSDP needs all ranks in the forward) and rank 0's
vectors are broadcast, so every rank holds the same index; observations are gathered
from every rank before any update. Checkpoint: the embedding vectors themselves (policy
embeddings cannot be recomputed after the policy moved): 4·D bytes per embedded prompt,
2.3 GB at 1M prompts with SmolLM2-135M (D = 576), 1.5 GB with MiniLM (D = 384), plus
81 bytes per prompt id of table columns (81 MB at 1M).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.advantages import zero_variance_groups
from lit_rlvr.selection import (
    PromptSelector,
    SelectionCallback,
    gather_rows,
    keep_only,
    seeded_generator,
    top_positions,
    warn_if_pool_is_batch_sized,
)
from lit_rlvr.callbacks.embedding import PromptEncoder, build_encoder
from lit_rlvr.callbacks.leeps_estimates import blend_prediction, neighbour_mean, rollout_rows, split_slots
from lit_rlvr.callbacks.prompt_index import PromptIndex, check_index_state, import_faiss
from lit_rlvr.selection_toolkit import PromptTable, require_keys, selector_name, table_state
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import PromptPool, RolloutBatch


__all__ = ["LEEPS", "blend_prediction", "neighbour_mean", "split_slots"]

EXPLOIT, EXPLORE = 0, 1
NEIGHBOURS = ("nearest", "nearest_with_history")
REFRESH = ("candidates", "all")
EXPLOIT_RANK = ("variance", "p_hat", "random")


# --------------------------------------------------------------------------- the selector


class LEEPS(PromptSelector):
    """Exploit prompts that had reward variance, explore the rest by a neighbour-informed success estimate.

    Args:
        k: neighbours per explore candidate (16).
        refresh_every: R, re-embed a candidate whose embedding is this many steps old (50; policy encoder only).
        window: steps in the moving average of each portfolio's non-trivial ratio (10).
        floor: least share of B each portfolio gets, rounded up to whole prompts (0.1).
        initial_ratio: each portfolio's non-trivial ratio before it has groups (0.5).
        neighbour_strength: κ, pseudo-rollouts the neighbour estimate adds to a prompt's
            Beta posterior (4.0); 0 ranks by own history only.
        prior_alpha: α0 of the own Beta posterior (1.0).
        prior_beta: β0 of the own Beta posterior (1.0).
        success_threshold: a rollout succeeds when its reward is ≥ this (1.0).
        encoder: "policy" (last-layer final-prompt-token hidden state) or "minilm" (offline).
        encoder_path: model directory for "minilm" (default: the packaged one).
        layer: hidden-state layer of the policy encoder (−1: last).
        embed_batch_size: prompts per embedding forward (64).
        index: "flat" (exact IndexFlatIP), "ivf" (IndexIVFFlat) or "hnsw" (approximate).
        hnsw_m: HNSW graph degree (32).
        hnsw_ef_search: HNSW search breadth (64).
        ivf_nlist: IVF lists (0: round(√N) when trained, at ``ivf_train_at`` prompts; retrained at 4× growth).
        ivf_nprobe: lists an IVF search visits (8; nprobe = nlist is exact).
        ivf_train_at: prompts embedded before the IVF is trained (4096; exact search before).
        search_backend: "faiss" (default) or "torch": who runs exact flat searches (both exact).
        neighbour_cache: reuse a prompt's neighbour ids until it is re-embedded or R steps old (False).
        neighbours: "nearest" (k nearest, those without history skipped) or "nearest_with_history".
        refresh: "candidates" (stale candidates re-embedded) or "all" (every indexed prompt every R steps).
        exploit_rank: "variance" (largest last-group variance), "p_hat" (own posterior mean nearest
            0.5) or "random" (a draw seeded by (seed, step)).
        reembed_on_mismatch: on resume with embeddings of another dimension (another model or
            encoder), drop them and re-embed instead of failing.
    """

    metric_names = (
        "embed_s", "embedded", "refreshed_all", "candidates", "candidates_exploit", "exploit_share", "explore_share",
        "exploit_nontrivial", "explore_nontrivial", "neighbour_hit_rate", "explore_no_estimate", "p_hat_selected_mean",
        "index_size", "query_s", "searched", "select_s", "groups_observed", "exploit_nontrivial_step",
        "explore_nontrivial_step", "predicted_vs_observed_mae", "predicted_vs_observed_mae_own",
    )

    def __init__(
        self,
        k: int = 16,
        refresh_every: int = 50,
        window: int = 10,
        floor: float = 0.1,
        initial_ratio: float = 0.5,
        neighbour_strength: float = 4.0,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        success_threshold: float = 1.0,
        encoder: str = "policy",
        encoder_path: Optional[str] = None,
        layer: int = -1,
        embed_batch_size: int = 64,
        index: str = "flat",
        hnsw_m: int = 32,
        hnsw_ef_search: int = 64,
        ivf_nlist: int = 0,
        ivf_nprobe: int = 8,
        ivf_train_at: int = 4096,
        search_backend: str = "faiss",
        neighbour_cache: bool = False,
        reembed_on_mismatch: bool = False,
        neighbours: str = "nearest",
        refresh: str = "candidates",
        exploit_rank: str = "variance",
    ) -> None:
        super().__init__()
        checks = [
            (k >= 1, f"LEEPS.k (neighbours) must be >= 1, got {k!r}"),
            (refresh_every >= 1, f"LEEPS.refresh_every (R) must be >= 1 step, got {refresh_every!r}"),
            (window >= 1, f"LEEPS.window must be >= 1 step, got {window!r}"),
            (0.0 <= floor <= 0.5, f"LEEPS.floor must be in [0, 0.5] (a share of B per portfolio), got {floor!r}"),
            (0.0 <= initial_ratio <= 1.0, f"LEEPS.initial_ratio must be in [0, 1], got {initial_ratio!r}"),
            (neighbour_strength >= 0, f"LEEPS.neighbour_strength (κ) must be >= 0, got {neighbour_strength!r}"),
            (prior_alpha > 0 and prior_beta > 0, f"LEEPS.prior_alpha and prior_beta must be > 0, got {prior_alpha!r}, {prior_beta!r}"),
            (encoder in ("policy", "minilm"), f"LEEPS.encoder must be 'policy' or 'minilm', got {encoder!r}"),
            (index in ("flat", "hnsw", "ivf"), f"LEEPS.index must be 'flat' (exact), 'hnsw' or 'ivf' (approximate), got {index!r}"),
            (search_backend == "faiss" or (search_backend == "torch" and index != "hnsw"),
             f"LEEPS.search_backend must be 'faiss', or 'torch' with index: flat or ivf; got {search_backend!r} with index: {index}"),
            (ivf_nlist >= 0 and ivf_nprobe >= 1 and ivf_train_at >= 1,
             f"LEEPS.ivf_nlist must be >= 0, ivf_nprobe and ivf_train_at >= 1; got {ivf_nlist!r}, {ivf_nprobe!r}, {ivf_train_at!r}"),
            (neighbours in NEIGHBOURS, f"LEEPS.neighbours must be one of {NEIGHBOURS}, got {neighbours!r}"),
            (refresh in REFRESH, f"LEEPS.refresh must be one of {REFRESH}, got {refresh!r}"),
            (exploit_rank in EXPLOIT_RANK, f"LEEPS.exploit_rank must be one of {EXPLOIT_RANK}, got {exploit_rank!r}"),
            (not (neighbour_cache and neighbours == "nearest_with_history"),
             "LEEPS.neighbour_cache reuses neighbour lists for up to R steps while the prompts with history change "
             "every step: use it with neighbours: nearest, or set neighbour_cache: false"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.k, self.refresh_every, self.window = int(k), int(refresh_every), int(window)
        self.floor, self.initial_ratio = float(floor), float(initial_ratio)
        self.neighbour_strength = float(neighbour_strength)
        self.prior_alpha, self.prior_beta = float(prior_alpha), float(prior_beta)
        self.success_threshold = float(success_threshold)
        self.encoder_name, self.encoder_path, self.layer = encoder, encoder_path, int(layer)
        self.embed_batch_size = int(embed_batch_size)
        self.index_kind, self.hnsw_m, self.hnsw_ef_search = index, int(hnsw_m), int(hnsw_ef_search)
        self.ivf_nlist, self.ivf_nprobe, self.ivf_train_at = int(ivf_nlist), int(ivf_nprobe), int(ivf_train_at)
        self.search_backend = search_backend
        self.neighbour_cache = bool(neighbour_cache)
        self.reembed_on_mismatch = bool(reembed_on_mismatch)
        self.neighbours, self.refresh, self.exploit_rank = neighbours, refresh, exploit_rank
        self.full_refresh_step = 0
        """Step of the last full re-embedding (``refresh: all``)."""
        self.encoder: Optional[PromptEncoder] = None
        """Built at setup; tests may set their own (anything with ``refreshes``, ``dim``, ``encode``)."""
        self.index: Optional[PromptIndex] = None
        self.table = PromptTable(
            {
                "alpha": (np.float64, self.prior_alpha),
                "beta": (np.float64, self.prior_beta),
                "last_step": (np.int64, -1),  # step of the last observed group, −1: none
                "last_success": (np.float64, 0.0),  # its success rate (valid where last_step >= 0)
                "last_var": (np.float64, 0.0),  # its reward variance (population)
                "last_nontrivial": (np.bool_, False),  # it had reward variance: the exploit portfolio
                "predicted_step": (np.int64, -1),  # step of the last explore prediction
                "predicted": (np.float64, 0.0),  # p̂ then (own + neighbours; valid where predicted_step >= 0)
                "predicted_own": (np.float64, 0.0),  # α/(α+β) then (own history only)
            }
        )
        self.window_nontrivial = np.zeros((self.window, 2), dtype=np.int64)
        """[W, 2] groups with reward variance per (step slot, portfolio)."""
        self.window_groups = np.zeros((self.window, 2), dtype=np.int64)
        """[W, 2] groups observed per (step slot, portfolio)."""
        self.updates = 0
        self._pending_index: Optional[dict[str, Any]] = None

    # ------------------------------------------------------------------ setup and state

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"encoder": self.encoder_name, "layer": self.layer, "prior_alpha": self.prior_alpha, "prior_beta": self.prior_beta}

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        """Build the index and encoder; fail on a missing faiss or a resumed index of another dimension."""
        import_faiss()
        warn_if_pool_is_batch_sized(trainer, "LEEPS", "set data.pool_multiple > 1, e.g. 4")
        if self.encoder is None:
            self.encoder = build_encoder(self.encoder_name, self.embed_batch_size, self.layer, self.encoder_path)
        self._ensure_index()
        dim = self.encoder.dim(pl_module)
        if self.index.dim is not None and self.index.dim != dim:
            if not self.reembed_on_mismatch:
                raise ValueError(
                    f"LEEPS: the checkpoint's prompt embeddings are {self.index.dim}-dimensional but the encoder "
                    f"({self.encoder_name}) gives {dim}: the checkpoint was written with another model or encoder. "
                    "Resume with the same model.policy and LEEPS.encoder, or set LEEPS.reembed_on_mismatch: true "
                    "to drop the stored embeddings and re-embed"
                )
            self.index = self._new_index()

    def _new_index(self) -> PromptIndex:
        return PromptIndex(self.index_kind, self.hnsw_m, self.hnsw_ef_search, search_backend=self.search_backend,
                           ivf_nlist=self.ivf_nlist, ivf_nprobe=self.ivf_nprobe, ivf_train_at=self.ivf_train_at)

    def _ensure_index(self) -> PromptIndex:
        if self.index is None:
            self.index = self._new_index()
            if self._pending_index is not None:
                self.index.load_state_dict(self._pending_index)
                self._pending_index = None
        return self.index

    @override
    def state_dict(self) -> dict[str, Any]:
        index = self.index.state_dict() if self.index is not None else (self._pending_index or {})
        return {
            "table": table_state(self.table),
            "index": index,
            "window_nontrivial": torch.from_numpy(self.window_nontrivial.copy()),
            "window_groups": torch.from_numpy(self.window_groups.copy()),
            "updates": self.updates,
            "full_refresh_step": self.full_refresh_step,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``full_refresh_step`` is optional: checkpoints before 5447439 lack it (0 then)."""
        owner = selector_name(self)
        require_keys(owner, state_dict, ("table", "index", "window_nontrivial", "window_groups", "updates"), optional=("full_refresh_step",))
        check_index_state(f"{owner} index", state_dict["index"])
        self.table.load_state_dict({k: torch.as_tensor(v).numpy() for k, v in state_dict["table"].items()}, f"{owner} table")
        for name in ("window_nontrivial", "window_groups"):
            saved = torch.as_tensor(state_dict[name]).numpy().astype(np.int64)
            if saved.shape != (self.window, 2):
                raise ValueError(f"LEEPS: the checkpoint's window is {saved.shape[0]} steps but LEEPS.window is {self.window}: resume with window: {saved.shape[0]}")
            setattr(self, name, saved.copy())
        self.updates = int(state_dict["updates"])
        self.full_refresh_step = int(state_dict.get("full_refresh_step", 0))
        self.index, self._pending_index = None, state_dict["index"]  # loaded at setup (faiss checked there)

    # ------------------------------------------------------------------ estimates

    def nontrivial_ratios(self) -> tuple[float, float]:
        """(exploit, explore) share of groups with reward variance over the window (``initial_ratio`` before any)."""
        groups = self.window_groups.sum(axis=0)  # [2]
        hits = self.window_nontrivial.sum(axis=0)
        r = [hits[p] / groups[p] if groups[p] > 0 else self.initial_ratio for p in (EXPLOIT, EXPLORE)]
        return float(r[0]), float(r[1])

    def predict(self, ids: Any, step: Optional[int] = None) -> dict[str, np.ndarray]:
        """Explore estimates for embedded prompt ids [Q]: p̂, own posterior mean, q, neighbours with history.
        With ``neighbour_cache`` and a ``step``, neighbour ids come through the cache."""
        ids = np.asarray(ids, dtype=np.int64)
        index = self._ensure_index()
        if self.neighbour_cache and step is not None:
            nbr, cos = index.cached_search(ids, self.k, step, self.refresh_every)  # [Q, k]
        elif self.neighbours == "nearest_with_history":
            nbr, cos = index.search(ids, self.k, among=np.flatnonzero(self.table["last_step"] >= 0))
        else:
            nbr, cos = index.search(ids, self.k)
        has_nbr = nbr >= 0
        seen = np.zeros_like(has_nbr)
        seen[has_nbr] = self.table.get("last_step", nbr[has_nbr]) >= 0
        rate = np.full(nbr.shape, np.nan)
        rate[seen] = self.table.get("last_success", nbr[seen])
        q, _ = neighbour_mean(rate, cos)  # [Q]
        alpha, beta = self.table.get("alpha", ids), self.table.get("beta", ids)
        return {
            "p_hat": blend_prediction(alpha, beta, q, self.neighbour_strength),
            "p_own": alpha / (alpha + beta),
            "q": q,
            "neighbours": has_nbr.sum(axis=1),
            "neighbours_seen": seen.sum(axis=1),
        }

    # ------------------------------------------------------------------ pre-rollout

    def embed(self, trainer: Optional[pl.Trainer], pl_module: SelectionHost, pool: PromptPool, indices: np.ndarray, step: int) -> int:
        """Embed the pool prompts at ``indices`` never embedded or stale (≥ R steps); returns how many."""
        index = self._ensure_index()
        ids = pool.ids.numpy()[indices]
        ids, first = np.unique(ids, return_index=True)
        when = index.embedded_step(ids)
        stale = (when < 0) | (self.encoder.refreshes & (step - when >= self.refresh_every))
        need, at = ids[stale], indices[first[stale]]
        if need.size == 0:
            return 0
        vectors = self.encoder.encode(pl_module, [pool.messages[i] for i in at.tolist()])  # [n, D]
        if trainer is not None and trainer.world_size > 1:
            vectors = trainer.strategy.broadcast(vectors, src=0)  # every rank indexes rank 0's vectors
        index.upsert(need, vectors, step)
        return int(need.size)

    def select(self, pool: PromptPool, step: int, seed: int = 0) -> None:
        """Narrow ``pool.keep`` to B eligible candidates: exploit by last variance, explore by p̂(1 − p̂).

        Every eligible candidate must be embedded (``embed``) before.
        """
        t0 = time.perf_counter()
        eligible = np.asarray(pool.eligible(), dtype=np.int64)
        ids = pool.ids.numpy()[eligible]  # [E]
        exploit = self.table.get("last_nontrivial", ids)  # [E] bool
        ex_idx, xp_idx = np.flatnonzero(exploit), np.flatnonzero(~exploit)
        t_query, searched = time.perf_counter(), self._ensure_index().searched
        est = self.predict(ids[xp_idx], step)  # [X] each
        query_s = time.perf_counter() - t_query
        searched = self.index.searched - searched
        ratios = self.nontrivial_ratios()
        n_exploit, n_explore = split_slots(pool.batch_size, ratios, (len(ex_idx), len(xp_idx)), self.floor)
        ex_pick = ex_idx[self._exploit_order(ids[ex_idx], step, seed)[:n_exploit]]
        p_hat = est["p_hat"]
        xp_order = top_positions(p_hat * (1.0 - p_hat), n_explore)
        xp_pick = xp_idx[xp_order]
        picked_ids = ids[xp_pick]
        self.table.set("predicted_step", picked_ids, step)
        self.table.set("predicted", picked_ids, p_hat[xp_order])
        self.table.set("predicted_own", picked_ids, est["p_own"][xp_order])
        keep_only(pool, eligible, np.concatenate([ex_pick, xp_pick]))
        chosen = max(len(ex_pick) + len(xp_pick), 1)
        slots = est["neighbours"].sum()
        self.update_metrics(
            {
                "candidates": float(len(eligible)),
                "candidates_exploit": float(len(ex_idx)),
                "exploit_share": len(ex_pick) / chosen,
                "explore_share": len(xp_pick) / chosen,
                "exploit_nontrivial": ratios[EXPLOIT],
                "explore_nontrivial": ratios[EXPLORE],
                "neighbour_hit_rate": float(est["neighbours_seen"].sum() / slots) if slots else float("nan"),
                "explore_no_estimate": float(np.isnan(est["q"]).mean()) if len(xp_idx) else float("nan"),
                "p_hat_selected_mean": float(p_hat[xp_order].mean()) if len(xp_order) else float("nan"),
                "index_size": float(len(self.index)),
                "query_s": query_s,
                "searched": float(searched),
                "select_s": time.perf_counter() - t0,
            }
        )

    @override
    def select_prompts(self, trainer: pl.Trainer, pl_module: SelectionHost, pool: PromptPool) -> None:
        step = pool.context.step
        t0 = time.perf_counter()
        refreshed = self.refresh_all(trainer, pl_module, step)
        embedded = self.embed(trainer, pl_module, pool, np.asarray(pool.eligible(), dtype=np.int64), step)
        self.set_metrics({"embed_s": time.perf_counter() - t0, "embedded": float(embedded + refreshed), "refreshed_all": float(refreshed)})
        self.select(pool, step, pool.context.seed)

    def _exploit_order(self, ids: np.ndarray, step: int, seed: int) -> np.ndarray:
        """Order of exploit candidates ``ids`` [X] by ``exploit_rank`` (ties keep pool order)."""
        if self.exploit_rank == "random":
            return torch.randperm(len(ids), generator=seeded_generator(seed, step, -1, "leeps|exploit")).numpy()
        if self.exploit_rank == "p_hat":
            p = self.table.get("alpha", ids) / (self.table.get("alpha", ids) + self.table.get("beta", ids))
            return np.argsort(-(p * (1.0 - p)), kind="stable")
        return np.argsort(-self.table.get("last_var", ids), kind="stable")

    def refresh_all(self, trainer: Optional[pl.Trainer], pl_module: SelectionHost, step: int) -> int:
        """``refresh: all``: every R steps re-embed every indexed prompt (messages from
        ``trainer.datamodule``: ``train_records[id]`` through ``messages_for``); returns how many."""
        index = self._ensure_index()
        if self.refresh != "all" or not self.encoder.refreshes or len(index) == 0 or step - self.full_refresh_step < self.refresh_every:
            return 0
        ids, dm = np.sort(index.row_ids[index.row_ids >= 0]), getattr(trainer, "datamodule", None)
        if not hasattr(dm, "messages_for"):
            raise ValueError("LEEPS.refresh: all re-embeds prompts by id from trainer.datamodule (a PromptDataModule); "
                             "this run has none: use refresh: candidates")
        vectors = self.encoder.encode(pl_module, [dm.messages_for(dm.train_records[i].question) for i in ids.tolist()])  # [N, D]
        if trainer is not None and trainer.world_size > 1:
            vectors = trainer.strategy.broadcast(vectors, src=0)
        index.upsert(ids, vectors, step)
        self.full_refresh_step = step
        return int(ids.size)

    # ------------------------------------------------------------------ observe

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        rows = gather_rows(trainer, rollout_rows(batch, self.success_threshold))  # [N, 3] from every rank
        self.observe(rows.numpy(), batch.context.step)

    def observe(self, rows: np.ndarray, step: int) -> None:
        """Update from [N, 3] (prompt id, reward, success) rollout rows of ``step``: portfolio ratios,
        prediction error, then each group's posterior and last-group record."""
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
        pid, reward, success = rows[:, 0].astype(np.int64), rows[:, 1], rows[:, 2]
        ids, inv = np.unique(pid, return_inverse=True)  # [U], [N]
        n = np.bincount(inv, minlength=len(ids)).astype(np.float64)  # [U]
        rate = np.bincount(inv, weights=success, minlength=len(ids)) / np.maximum(n, 1)
        mean = np.bincount(inv, weights=reward, minlength=len(ids)) / np.maximum(n, 1)
        var = np.bincount(inv, weights=(reward - mean[inv]) ** 2, minlength=len(ids)) / np.maximum(n, 1)
        nontrivial = np.zeros(len(ids), dtype=bool)
        nontrivial[inv] = ~zero_variance_groups(torch.from_numpy(reward), torch.from_numpy(inv)).numpy()

        # Portfolio of each group as it was at selection: exploit iff its previous group had variance.
        portfolio = np.where(self.table.get("last_nontrivial", ids), EXPLOIT, EXPLORE)
        slot = self.updates % self.window
        for p in (EXPLOIT, EXPLORE):
            self.window_groups[slot, p] = int((portfolio == p).sum())
            self.window_nontrivial[slot, p] = int((nontrivial & (portfolio == p)).sum())

        predicted = self.table.get("predicted_step", ids) == step  # explore picks of this step
        err = np.abs(self.table.get("predicted", ids[predicted]) - rate[predicted])
        err_own = np.abs(self.table.get("predicted_own", ids[predicted]) - rate[predicted])

        self.table.set("alpha", ids, self.table.get("alpha", ids) + n * rate)
        self.table.set("beta", ids, self.table.get("beta", ids) + n * (1.0 - rate))
        self.table.set("last_step", ids, step)
        self.table.set("last_success", ids, rate)
        self.table.set("last_var", ids, var)
        self.table.set("last_nontrivial", ids, nontrivial)
        self.updates += 1
        groups = np.bincount(portfolio, minlength=2)
        hits = np.bincount(portfolio, weights=nontrivial, minlength=2)
        self.update_metrics(
            {
                "groups_observed": float(len(ids)),
                "exploit_nontrivial_step": float(hits[EXPLOIT] / groups[EXPLOIT]) if groups[EXPLOIT] else float("nan"),
                "explore_nontrivial_step": float(hits[EXPLORE] / groups[EXPLORE]) if groups[EXPLORE] else float("nan"),
                "predicted_vs_observed_mae": float(err.mean()) if err.size else float("nan"),
                "predicted_vs_observed_mae_own": float(err_own.mean()) if err_own.size else float("nan"),
            }
        )
