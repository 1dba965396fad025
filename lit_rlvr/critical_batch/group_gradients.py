"""Per-group gradients of the trainable linear layers, read by hooks during the update's ordinary backward.

A linear layer's weight gradient is Σ_t e_t x_tᵀ over every position t of every row (x the layer's
input, e the gradient of its output). Rows never attend to each other, so the sum over the positions
of one prompt group's rows is exactly that group's gradient, and the groups' gradients add up to the
layer's. ``GroupGradients`` keeps x in a forward hook, receives e in a hook on the layer's output, and
adds each group's Σ_t e_t x_tᵀ into a [K, out, in] accumulator (one batched product per layer and
forward). The hooks only read: the training gradient is computed exactly as without them.

Shapes: n rows of a forward, S positions, in/out a layer's features, U groups in a forward, R the most
rows of one group in it, K groups in the step.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import torch

from lit_rlvr.critical_batch.noise_scale import StepMoments

__all__ = ["GroupGradients", "SPLIT_PARTS"]

SPLIT_PARTS = 3
"""With the within-group split, a group g records three parts: ids 3g (its even rollouts), 3g + 1 (its odd rollouts)
and 3g + 2 (its shared prompt forward, one sum over all its rows, with ``share_prompt_prefix``)."""


class _ForwardPlan:
    """One forward's rows grouped by unit: accumulator slots [U] and row indices [U, R] (n = the zero pad row)."""

    def __init__(self, units: torch.Tensor, slot_of: Callable[[int], int]) -> None:
        units = units.cpu()
        ids = [u for u in torch.unique(units).tolist() if u >= 0]  # a negative id is a placeholder row: not recorded
        rows = [torch.nonzero(units == u).flatten() for u in ids]
        width = max((len(r) for r in rows), default=0)
        n = len(units)
        self.index = torch.full((len(ids), width), n, dtype=torch.long)  # [U, R]
        for k, r in enumerate(rows):
            self.index[k, : len(r)] = r
        self.slots = torch.tensor([slot_of(u) for u in ids], dtype=torch.long)  # [U]
        # the common layouts, a view with no copy: every row in order, groups of equal size one after another
        self.contiguous = len(ids) * width == n and bool((self.index.flatten() == torch.arange(n)).all())

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """[n, S, d] -> [U, R·S, d]: each group's positions, zero rows where a group has fewer than R."""
        if self.contiguous:
            return t.reshape(len(self.slots), -1, t.shape[-1])
        padded = torch.cat([t, t.new_zeros((1, *t.shape[1:]))])  # [n+1, S, d]
        g = padded[self.index.to(t.device)]  # [U, R, S, d]
        return g.reshape(g.shape[0], -1, t.shape[-1])


class GroupGradients:
    """Per-group gradients of the trainable ``nn.Linear`` modules, recorded by hooks during the ordinary backward.

    Use: ``attach(model)`` once per update; before each forward with gradient, ``expect(units)`` with
    that forward's [n] group id per batch row (the hooks take one per top-level forward; a negative id
    marks a placeholder row); after the iteration's backward passes, ``moments(...)``; ``reset()``
    between optimizer steps; ``detach()`` at the end.
    """

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._queue: list[torch.Tensor] = []
        self._current: Optional[_ForwardPlan] = None
        self.params: list[torch.nn.Parameter] = []
        self._slots: dict[int, int] = {}
        self._acc: list[Optional[torch.Tensor]] = []
        """Per recorded parameter, [K, *shape] float32: each group's gradient (slot order of ``_slots``)."""

    @staticmethod
    def modules_of(model: torch.nn.Module) -> list[torch.nn.Linear]:
        """The linear layers whose weight trains (LoRA's A and B under peft), less any tied to an embedding
        (an output layer sharing the input embedding's weight: its gradient has a lookup part no hook sees)."""
        embedded = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
        return [
            m for m in model.modules()
            if isinstance(m, torch.nn.Linear) and m.weight.requires_grad and id(m.weight) not in embedded
        ]

    def attach(self, model: torch.nn.Module) -> "GroupGradients":
        self.detach()
        self._handles.append(model.register_forward_pre_hook(self._next_forward))
        for module in self.modules_of(model):
            w = len(self.params)
            self.params.append(module.weight)
            bias = None
            if module.bias is not None and module.bias.requires_grad:
                bias = len(self.params)
                self.params.append(module.bias)
            self._handles.append(module.register_forward_hook(self._forward_hook(w, bias)))
        self._acc = [None] * len(self.params)
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles, self.params, self._queue, self._current = [], [], [], None
        self.reset()

    def expect(self, units: Sequence[torch.Tensor]) -> None:
        """The group id of each batch row ([n] int64), one tensor per coming forward with gradient."""
        self._queue.extend(units)

    def reset(self) -> None:
        """Forget the recorded gradients and any pending group ids (a new optimizer step)."""
        self._slots, self._acc, self._queue = {}, [None] * len(self.params), []

    @property
    def grads(self) -> dict[int, dict[int, torch.Tensor]]:
        """group id -> {parameter index: its gradient from this group's rows} (views of the accumulators)."""
        return {u: {i: acc[k] for i, acc in enumerate(self._acc) if acc is not None} for u, k in self._slots.items()}

    def stacked(self) -> tuple[list[int], list[torch.Tensor]]:
        """The recorded group ids [K] in slot order and, per recorded parameter, its groups' gradients as [K, numel]
        (views of the accumulators; zeros for a parameter no group's rows reached)."""
        ids, k = list(self._slots), len(self._slots)
        flat = []
        for p, acc in zip(self.params, self._acc):
            if acc is None:
                flat.append(p.new_zeros((k, p.numel()), dtype=torch.float32))
            else:
                grown = acc if acc.shape[0] == k else torch.cat([acc, acc.new_zeros((k - acc.shape[0], *acc.shape[1:]))])
                flat.append(grown.reshape(k, -1))
        return ids, flat

    def drop(self, unit: int) -> None:
        """Zero one group's recorded gradients (as if it had carried none)."""
        if unit in self._slots:
            for acc in self._acc:
                if acc is not None:
                    acc[self._slots[unit]].zero_()

    def _slot(self, unit: int) -> int:
        return self._slots.setdefault(int(unit), len(self._slots))

    def _next_forward(self, module: torch.nn.Module, args: Any) -> None:
        if torch.is_grad_enabled():
            self._current = _ForwardPlan(self._queue.pop(0), self._slot) if self._queue else None

    def _forward_hook(self, w: int, bias: Optional[int]) -> Callable[..., None]:
        def hook(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            plan = self._current
            if plan is None or not len(plan.slots) or not torch.is_grad_enabled() or not output.requires_grad:
                return
            x = inputs[0].detach()  # [n, S, in]: autograd keeps it for the weight gradient anyway
            output.register_hook(lambda e: self._accumulate(plan, x, e, w, bias))

        return hook

    def _add(self, i: int, slots: torch.Tensor, values: torch.Tensor) -> None:
        need = len(self._slots)
        acc = self._acc[i]
        if acc is None or acc.shape[0] < need:  # a group not seen before in this step: grow the accumulator
            grown = values.new_zeros((need, *values.shape[1:]))
            if acc is not None:
                grown[: acc.shape[0]] = acc
            self._acc[i] = acc = grown
        acc.index_add_(0, slots.to(acc.device), values)

    def _accumulate(self, plan: _ForwardPlan, x: torch.Tensor, e: torch.Tensor, w: int, bias: Optional[int]) -> None:
        xu = plan.gather(x.reshape(x.shape[0], -1, x.shape[-1]).float())  # [U, R·S, in]
        eu = plan.gather(e.reshape(e.shape[0], -1, e.shape[-1]).float())  # [U, R·S, out]
        self._add(w, plan.slots, torch.bmm(eu.transpose(1, 2), xu))  # [U, out, in]: Σ_t e_t x_tᵀ per group
        if bias is not None:
            self._add(bias, plan.slots, eu.sum(dim=1))  # [U, out]

    def _parts(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For ids recorded as ``SPLIT_PARTS · group + part``: per group, the accumulator rows of its two halves and
        its shared prompt part ([K] each; the index of a zero pad row where a group has none)."""
        pad = len(self._slots)
        groups = sorted({u // SPLIT_PARTS for u in self._slots})
        index = torch.full((SPLIT_PARTS, len(groups)), pad, dtype=torch.long)  # [3, K]
        for k, g in enumerate(groups):
            for part in range(SPLIT_PARTS):
                index[part, k] = self._slots.get(SPLIT_PARTS * g + part, pad)
        return index[0], index[1], index[2]

    def moments(
        self, units_all: int, units_informative: int, scale: float = 1.0,
        adam_denominators: Optional[list[Optional[torch.Tensor]]] = None,
        reduce: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, split: bool = False,
    ) -> StepMoments:
        """The step's sums over its groups' gradients (each divided by ``scale``: the loss's multiplier).

        ``adam_denominators``: per recorded parameter √v̂ + ε (None: no preconditioned sums).
        ``reduce``: sums a tensor over ranks (None: one process); K_all and K_inf are already global.
        ``split``: the ids were ``SPLIT_PARTS · group + part`` (part 0 and 1 a group's two halves, 2 its shared
        prompt forward): a group's gradient is the sum of its parts, and Σ_j |h_j,0 − h_j,1|² is added.
        """
        device = self.params[0].device if self.params else torch.device("cpu")
        adam = adam_denominators is not None and all(d is not None for d in adam_denominators)
        sums = torch.zeros(3, dtype=torch.float64, device=device)  # Σ_j |h_j|², Σ_j |h_j / (√v̂ + ε)|², Σ_j |d_j|²
        parts = self._parts() if split else None
        totals = []
        for i, p in enumerate(self.params):
            acc = self._acc[i]
            if acc is None:
                totals.append(torch.zeros(p.numel(), dtype=torch.float64, device=device))
                continue
            g = acc / scale  # [K, *shape] float32; squares summed in float64
            if parts is not None:  # [K parts, ...] -> [K groups, ...]: halves and prompt part added, halves' difference
                padded = torch.cat([g, g.new_zeros((len(self._slots) - g.shape[0] + 1, *g.shape[1:]))])
                first, second, shared = (padded[ix.to(g.device)] for ix in parts)
                g = first + second + shared
                sums[2] += (first - second).pow(2).sum(dtype=torch.float64)
            sums[0] += g.pow(2).sum(dtype=torch.float64)
            if adam:
                sums[1] += (g / adam_denominators[i]).pow(2).sum(dtype=torch.float64)
            totals.append(g.sum(dim=0, dtype=torch.float64).flatten())
        flat = torch.cat(totals) if totals else torch.zeros(0, dtype=torch.float64, device=device)  # Σ_j h_j
        if reduce is not None:
            flat, sums = reduce(flat), reduce(sums)
        sq_sum_adam = math.nan
        if adam:
            den = torch.cat([d.flatten() for d in adam_denominators]) if adam_denominators else flat
            sq_sum_adam = float((flat / den).pow(2).sum())
        return StepMoments(
            int(units_all), int(units_informative), float(sums[0]), float(flat.pow(2).sum()),
            float(sums[1]) if adam else math.nan, sq_sum_adam, float(sums[2]) if split else math.nan,
        )
