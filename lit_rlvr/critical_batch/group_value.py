"""What one prompt group's gradient is worth: its size and where it points, against the step and a held-out batch.

The lever model priced an informative group that a selector chose as worth an average one; the records said it was
not. ``GroupValueProbe`` (``lit_rlvr.bench.group_value``) measures it: at a probe step, the gradient h_j of each
group the step trains on, the gradients c_k of a uniform draw of candidate prompts at the same weights, and a held-out
gradient g_H (one backward over a fixed batch of held-out prompts' rollouts). This module is the arithmetic on the
recorded per-group gradients (``GroupGradients.stacked``): per parameter i a [K, n_i] stack of K groups' gradients.

For each group it gives: |h|; h·S and its cosine with the step's gradient S = Σ_j h_j (the trained groups'); the
cosine with the rest of the step, S − h for a trained group (S includes it: at 2 groups a step its own half would
dominate) and S for a candidate; and its cosine with g_H and projection h·ĝ_H (the first-order change of the held-out
objective along ĝ_H a group's gradient brings: the value the summary compares).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

__all__ = ["Stacks", "group_rows", "total", "squared_norm"]

Stacks = Sequence[torch.Tensor]
"""Per recorded parameter i, [K, n_i] float32: K groups' gradients."""


def total(stacks: Stacks) -> list[torch.Tensor]:
    """Per parameter [n_i]: the groups' sum (the step's gradient, before the optimizer)."""
    return [s.sum(dim=0) for s in stacks]


def squared_norm(vector: Sequence[torch.Tensor]) -> float:
    """|v|² of a vector kept as per-parameter pieces, summed in float64."""
    return float(sum(v.double().pow(2).sum() for v in vector))


def _moments(stacks: Stacks, vectors: Sequence[Optional[Sequence[torch.Tensor]]]) -> torch.Tensor:
    """[1 + V, K] float64 in one pass over the stacks: each group's |h|², then its dot product with each vector
    (a NaN row for a vector that is None)."""
    k = stacks[0].shape[0] if stacks else 0
    out = torch.zeros(1 + len(vectors), k, dtype=torch.float64)
    for i, s in enumerate(stacks):
        d = s.double()  # one parameter's [K, n_i], converted once
        out[0] += d.pow(2).sum(dim=1).cpu()
        for j, v in enumerate(vectors):
            if v is not None:
                out[1 + j] += (d @ v[i].double().flatten()).cpu()
    for j, v in enumerate(vectors):
        if v is None:
            out[1 + j] = math.nan
    return out


def _cos(dot: float, a2: float, b2: float) -> float:
    return dot / math.sqrt(a2 * b2) if a2 > 0 and b2 > 0 and math.isfinite(dot) else math.nan


def group_rows(
    stacks: Stacks, ids: Sequence[int], step_gradient: Sequence[torch.Tensor], heldout: Optional[Sequence[torch.Tensor]],
    in_step: bool,
) -> list[dict[str, float]]:
    """One row per group: ``norm``, ``cos_step`` (with S), ``cos_rest`` (with S − h when ``in_step``, the group being
    one of S's, else with S), ``cos_heldout`` and ``proj_heldout`` (h·g_H / |g_H|; NaN without ``heldout``).
    ``informative`` is 1 for a group with a non-zero gradient (its advantages were not all zero)."""
    norms2, dot_step, dot_heldout = _moments(stacks, [step_gradient, heldout])
    s2, h2 = squared_norm(step_gradient), squared_norm(heldout) if heldout is not None else math.nan
    rows = []
    for k, unit in enumerate(ids):
        n2, ds = float(norms2[k]), float(dot_step[k])
        rest2, dot_rest = (s2 - 2 * ds + n2, ds - n2) if in_step else (s2, ds)  # |S − h|², h·(S − h)
        dh = float(dot_heldout[k])
        rows.append({
            "unit": int(unit), "informative": float(n2 > 0), "norm": math.sqrt(n2),
            "cos_step": _cos(ds, n2, s2), "cos_rest": _cos(dot_rest, n2, max(rest2, 0.0)),
            "cos_heldout": _cos(dh, n2, h2), "proj_heldout": dh / math.sqrt(h2) if h2 > 0 else math.nan,
        })
    return rows
