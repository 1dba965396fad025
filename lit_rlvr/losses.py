"""Pure loss functions: the clipped policy surrogate, its aggregations, KL and DPO.

Shapes: N = sequences in the (micro-)batch, L = padded completion length.
Every function here is pure (tensors in, tensors out) so it can be tested
against numbers worked out by hand.

Aggregations (docs/methods.md, "GRPO core"):
- ``token-mean``               DAPO (arXiv 2503.14476): Σ ℓ / Σ tokens.
- ``seq-mean-token-mean``      GRPO (DeepSeekMath, arXiv 2402.03300): mean over
                               sequences of each sequence's token mean.
- ``seq-mean-token-sum-norm``  Dr.GRPO (arXiv 2503.20783): Σ ℓ / (N · L_max).

Gradient accumulation: the normalisers (total tokens, total sequences) are
arguments, so a caller that splits a batch into micro-batches passes the totals
of the whole batch and the summed micro-batch losses equal the full-batch loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def loss_sequences(mask: torch.Tensor) -> float:
    """The N of the seq-mean aggregations: rows of ``mask`` [N, L] with at least one loss token.

    A row with no loss token (``mask_truncated`` masking a truncated completion, DAPO's
    overlong filtering; the module's zero-weight placeholder row) is not a sequence of the
    batch: masked out means the same as filtered out (DynamicSampling, PODS). Counting it
    would shrink every other row's share by the truncation rate, in seq-mean-token-mean and
    Dr.GRPO's N · L_max alike, while token-mean already ignores it; so the three
    aggregations agree that an empty row is absent. TRL divides by every row, and so does
    verl by default since its PR #4510 dropped the "exclude fully masked sequences" step
    (an ``exclude_fully_masked_seq`` option was proposed later); lit-rlvr keeps the
    exclusion so that a rollout's loss weight does not depend on how many others were
    masked. ``Normalizer.of`` and ``Updater.normalizer`` (``lit_rlvr.update``) both count with this.
    """
    return float((mask.sum(dim=1) > 0).sum())  # [N, L] -> rows with a loss token


@dataclass
class Normalizer:
    """Totals of the whole optimizer-step batch, used to normalise each micro-batch."""

    num_tokens: float
    """Σ mask over the whole batch (token-mean)."""
    num_sequences: float
    """N over the whole batch (seq-mean-*): rows with a loss token (``loss_sequences``)."""
    max_len: float
    """L_max, the completion-length cap (Dr.GRPO's constant)."""

    @staticmethod
    def of(mask: torch.Tensor, max_len: Optional[int] = None) -> "Normalizer":
        """Totals of a single batch (no accumulation)."""
        return Normalizer(
            num_tokens=float(mask.sum().clamp(min=1)),
            num_sequences=max(loss_sequences(mask), 1.0),
            max_len=float(max_len if max_len is not None else mask.shape[1]),
        )


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
    dual_clip: Optional[float] = 3.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO/GRPO loss with clip-higher and dual clip.

    ℓ_t = max(−A·ρ_t, −A·clip(ρ_t, 1−ε_low, 1+ε_high)); for A < 0 also
    ℓ_t = min(ℓ_t, −A·c) (dual clip, c = ``dual_clip``; None disables it).

    Args:
        logp: [N, L] log π_θ of the sampled tokens (requires grad).
        old_logp: [N, L] log π_old of the same tokens (no grad).
        advantages: [N] per-sequence or [N, L] per-token advantages.
    Returns:
        (loss [N, L], clipped [N, L] bool: tokens where a clip bound is active).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [N, 1]
    ratio = torch.exp(logp - old_logp)  # [N, L]
    unclipped = -advantages * ratio  # [N, L]
    clipped = -advantages * torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)  # [N, L]
    loss = torch.maximum(unclipped, clipped)  # [N, L]
    is_clipped = clipped > unclipped
    if dual_clip is not None:
        cap = -advantages * dual_clip  # [N, 1] positive where A < 0
        dual = torch.minimum(loss, cap)
        negative = (advantages < 0).expand_as(loss)
        is_clipped = is_clipped | (negative & (loss > cap))
        loss = torch.where(negative, dual, loss)
    return loss, is_clipped


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    aggregation: Aggregation = "token-mean",
    normalizer: Optional[Normalizer] = None,
) -> torch.Tensor:
    """Reduce a per-token loss [N, L] over the completion ``mask`` [N, L] to a scalar.

    With ``normalizer`` the result is this micro-batch's share of the full-batch
    loss, so micro-batch losses add up to it (accumulation invariance).
    """
    mask = mask.to(per_token.dtype)
    norm = normalizer or Normalizer.of(mask)
    masked = per_token * mask  # [N, L]
    if aggregation == "token-mean":
        return masked.sum() / norm.num_tokens
    if aggregation == "seq-mean-token-mean":
        per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [N]
        return per_seq.sum() / norm.num_sequences
    if aggregation == "seq-mean-token-sum-norm":
        return masked.sum() / (norm.num_sequences * norm.max_len)
    raise ValueError(f"unknown aggregation {aggregation!r}; choose one of {AGGREGATIONS}")


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, clamp: float = 10.0) -> torch.Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref): e^{ref−logp} − (ref−logp) − 1, clamped to [−c, c].  # [N, L]"""
    delta = ref_logp - logp  # [N, L]
    return torch.clamp(torch.exp(delta) - delta - 1.0, min=-clamp, max=clamp)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int) -> torch.Tensor:
    """DAPO soft overlong punishment: min(−(len − (L_max − L_buf)) / L_buf, 0).  # [N]"""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    over = (lengths.float() - (max_len - buffer)) / buffer
    return torch.clamp(-over, max=0.0)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) gathered at ``targets``.

    Args:
        logits: [N, L, V] logits predicting each target token.
        targets: [N, L] token ids.
    Returns:
        [N, L] log-probabilities.
    """
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logits = logits.float()
    # log_softmax at the target = logit − logsumexp; avoids materialising [N, L, V] log-probs twice.
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)  # [N, L]
    return picked - torch.logsumexp(logits, dim=-1)  # [N, L]


def preference_margin(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
) -> torch.Tensor:
    """h = (log π(y_c|x) − log π_ref(y_c|x)) − (log π(y_r|x) − log π_ref(y_r|x)) over [N] summed log-probs.  # [N]"""
    return (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """Sigmoid DPO loss (Rafailov et al., arXiv 2305.18290) over [N] summed sequence log-probs.

    −log σ(β·((π_c − ref_c) − (π_r − ref_r))), mean over pairs.
    """
    margin = preference_margin(policy_chosen, policy_rejected, ref_chosen, ref_rejected)  # [N]
    return -F.logsigmoid(beta * margin).mean()


def ipo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """IPO loss (Azar et al., arXiv 2310.12036, eq. 17) over [N] summed sequence log-probs.

    (h − 1/(2β))², mean over pairs, with h the DPO log-ratio margin: a squared loss that
    regresses the margin to a finite target instead of pushing it to infinity, so it does
    not overfit deterministic preferences. (TRL's "ipo" divides each log-prob by its length
    first; pass per-token means here to get that variant.)
    """
    margin = preference_margin(policy_chosen, policy_rejected, ref_chosen, ref_rejected)  # [N]
    return ((margin - 1.0 / (2.0 * beta)) ** 2).mean()
