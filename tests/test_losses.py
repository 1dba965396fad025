"""Losses against numbers worked out by hand (ε_low 0.2, ε_high 0.28, dual clip c = 3)."""

import math

import pytest
import torch

from lit_rlvr.losses import (
    Normalizer,
    aggregate,
    clipped_surrogate,
    dpo_loss,
    k3_kl,
    loss_sequences,
    overlong_penalty,
    token_logprobs,
)


def _loss(ratio: float, adv: float, dual_clip=3.0):
    logp = torch.tensor([[math.log(ratio)]])
    old = torch.zeros(1, 1)
    loss, clipped = clipped_surrogate(logp, old, torch.tensor([adv]), 0.2, 0.28, dual_clip)
    return float(loss), bool(clipped)


@pytest.mark.parametrize(
    "ratio, adv, expected, clipped",
    [
        # A = +1, ρ = 1.1: inside [0.8, 1.28] -> −Aρ = −1.1, no clip.
        (1.1, 1.0, -1.1, False),
        # A = +1, ρ = 1.5: −Aρ = −1.5, −A·clip = −1.28; max = −1.28 (upper clip, ε_high = 0.28).
        (1.5, 1.0, -1.28, True),
        # A = +1, ρ = 0.5: −0.5 vs −0.8; max = −0.5 (no clip on the low side for A > 0).
        (0.5, 1.0, -0.5, False),
        # A = −1, ρ = 0.5: 0.5 vs 0.8; max = 0.8 (lower clip, ε_low = 0.2).
        (0.5, -1.0, 0.8, True),
        # A = −1, ρ = 2: 2.0 vs 1.28; max = 2.0, below the dual-clip cap −A·c = 3.
        (2.0, -1.0, 2.0, False),
        # A = −1, ρ = 5: max(5, 1.28) = 5, dual clip caps it at 3.
        (5.0, -1.0, 3.0, True),
        # A = −2, ρ = 5: max(10, 2.56) = 10, cap −A·c = 6.
        (5.0, -2.0, 6.0, True),
    ],
)
def test_clipped_surrogate_by_hand(ratio, adv, expected, clipped):
    loss, was_clipped = _loss(ratio, adv)
    assert loss == pytest.approx(expected, abs=1e-5)
    assert was_clipped == clipped


def test_dual_clip_off_leaves_large_negative_ratio_unbounded():
    # A = −1, ρ = 5 without dual clip: max(5, 1.28) = 5.
    assert _loss(5.0, -1.0, dual_clip=None)[0] == pytest.approx(5.0, abs=1e-5)


def test_clip_bounds_stop_the_gradient():
    # Clipped token (A = +1, ρ = 1.5) has zero gradient; unclipped (ρ = 1.1) has dℓ/dlogp = −Aρ = −1.1.
    logp = torch.tensor([[math.log(1.5), math.log(1.1)]], requires_grad=True)
    loss, _ = clipped_surrogate(logp, torch.zeros(1, 2), torch.tensor([1.0]))
    loss.sum().backward()
    assert logp.grad[0, 0] == pytest.approx(0.0)
    assert logp.grad[0, 1] == pytest.approx(-1.1, abs=1e-5)


# Two sequences, lengths 3 and 1 (L = 3); per-token losses a, b, c = 1, 2, 3 and d = 4.
PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])  # the 9s are padding
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_token_mean():
    # (1 + 2 + 3 + 4) / 4 tokens = 2.5
    assert float(aggregate(PER_TOKEN, MASK, "token-mean")) == pytest.approx(2.5)


def test_seq_mean_token_mean():
    # ((1 + 2 + 3) / 3 + 4 / 1) / 2 sequences = (2 + 4) / 2 = 3
    assert float(aggregate(PER_TOKEN, MASK, "seq-mean-token-mean")) == pytest.approx(3.0)


def test_seq_mean_token_sum_norm():
    # Dr.GRPO: Σℓ / (N · L_max) with L_max = 4 (the generation cap): 10 / (2 · 4) = 1.25
    norm = Normalizer(num_tokens=4, num_sequences=2, max_len=4)
    assert float(aggregate(PER_TOKEN, MASK, "seq-mean-token-sum-norm", norm)) == pytest.approx(1.25)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_sum_to_the_full_batch(aggregation):
    norm = Normalizer(num_tokens=4, num_sequences=2, max_len=3)
    full = aggregate(PER_TOKEN, MASK, aggregation, norm)
    parts = aggregate(PER_TOKEN[:1], MASK[:1], aggregation, norm) + aggregate(PER_TOKEN[1:], MASK[1:], aggregation, norm)
    assert float(parts) == pytest.approx(float(full))


# A row with no loss tokens (``mask_truncated`` masked its truncated completion) is not a
# sequence of the batch: Normalizer.of and the module's normaliser both count rows through
# ``loss_sequences``. Two rows (L = 3): row 0 has losses 1, 2, 3; row 1 has none (its 7s are
# masked). Σℓ = 6 over 3 tokens in 1 sequence; L_max = 4.
EMPTY_ROW_LOSS = torch.tensor([[1.0, 2.0, 3.0], [7.0, 7.0, 7.0]])
EMPTY_ROW_MASK = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])


def test_loss_sequences_counts_rows_with_a_loss_token():
    assert loss_sequences(EMPTY_ROW_MASK) == 1.0
    assert loss_sequences(MASK) == 2.0
    assert loss_sequences(torch.zeros(3, 5)) == 0.0
    norm = Normalizer.of(EMPTY_ROW_MASK, max_len=4)
    assert (norm.num_tokens, norm.num_sequences, norm.max_len) == (3.0, 1.0, 4.0)
    # An all-empty batch still divides by 1, never 0.
    assert Normalizer.of(torch.zeros(2, 3)).num_sequences == 1.0


@pytest.mark.parametrize(
    "aggregation, expected",
    [
        ("token-mean", 2.0),  # (1 + 2 + 3) / 3 tokens = 2 (the empty row adds no token)
        ("seq-mean-token-mean", 2.0),  # ((1 + 2 + 3) / 3) / 1 sequence = 2 (not 2 / 2 = 1)
        ("seq-mean-token-sum-norm", 1.5),  # Dr.GRPO: 6 / (1 · 4) = 1.5 (not 6 / (2 · 4) = 0.75)
    ],
)
def test_a_row_without_loss_tokens_is_not_a_sequence(aggregation, expected):
    norm = Normalizer.of(EMPTY_ROW_MASK, max_len=4)
    assert float(aggregate(EMPTY_ROW_LOSS, EMPTY_ROW_MASK, aggregation, norm)) == pytest.approx(expected)
    # Default normaliser (Normalizer.of, L_max = mask width 3) follows the same rule.
    default_expected = {"token-mean": 2.0, "seq-mean-token-mean": 2.0, "seq-mean-token-sum-norm": 6 / (1 * 3)}
    assert float(aggregate(EMPTY_ROW_LOSS, EMPTY_ROW_MASK, aggregation)) == pytest.approx(default_expected[aggregation])
    # Dropping the empty row changes nothing: masked out is the same as filtered out.
    dropped = aggregate(EMPTY_ROW_LOSS[:1], EMPTY_ROW_MASK[:1], aggregation, Normalizer.of(EMPTY_ROW_MASK[:1], max_len=4))
    assert float(dropped) == pytest.approx(expected)


def test_unknown_aggregation_names_the_choices():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(PER_TOKEN, MASK, "sum")


def test_k3_kl_by_hand():
    # ref − logp = δ; k3 = e^δ − δ − 1: δ = 0 -> 0; δ = 1 -> e − 2 = 0.71828; δ = −1 -> e^−1 = 0.36788
    logp = torch.tensor([[0.0, 0.0, 1.0]])
    ref = torch.tensor([[0.0, 1.0, 0.0]])
    assert k3_kl(logp, ref).tolist()[0] == pytest.approx([0.0, math.e - 2, math.exp(-1)], abs=1e-5)
    # clamped to 10: δ = 5 -> e^5 − 6 = 142.4 -> 10
    assert float(k3_kl(torch.zeros(1, 1), torch.full((1, 1), 5.0))) == pytest.approx(10.0)


def test_overlong_penalty_by_hand():
    # L_max 100, buffer 20: no penalty up to 80; length 90 -> −(90 − 80)/20 = −0.5; 100 -> −1
    assert overlong_penalty(torch.tensor([50, 80, 90, 100]), 100, 20).tolist() == pytest.approx([0, 0, -0.5, -1])


def test_token_logprobs_matches_log_softmax():
    logits = torch.randn(2, 3, 7)
    targets = torch.randint(0, 7, (2, 3))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, targets, 0.7), expected, atol=1e-6)


def test_dpo_loss_by_hand():
    # margin = (−1 − −2) − (−3 − −2) = 1 − (−1) = 2; β = 0.5 -> −log σ(1) = 0.31326
    loss = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5)
    assert float(loss) == pytest.approx(0.313262, abs=1e-5)
