"""Validation metrics on fixed inputs; expected values worked out by hand."""

import math

import pytest
import torch

from torchmetrics.utilities.data import dim_zero_sum

from lit_rlvr.data import MeanAtK, PassAtOne


def test_pass_at_one_accumulates_over_updates():
    m = PassAtOne()
    m.update(torch.tensor([True, False, True, True]))  # 3 of 4
    m.update(torch.tensor([False, False]))  # 0 of 2
    assert m.compute().item() == pytest.approx(3 / 6)
    m.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(m.compute().item())  # no prompts: 0 / 0


def test_pass_at_one_threshold_binarizes_partial_credit():
    scores = torch.tensor([1.0, 0.5, 0.01, 1.0, 0.0])
    plain, strict = PassAtOne(), PassAtOne(threshold=1.0)
    plain.update(scores)
    strict.update(scores)
    assert plain.compute().item() == pytest.approx(2.51 / 5)  # (1 + 0.5 + 0.01 + 1 + 0) / 5
    assert strict.compute().item() == pytest.approx(2 / 5)


def test_mean_at_k_is_mean_of_per_prompt_means():
    m = MeanAtK(k=4)
    m.update(torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]))  # prompt means 0.5, 1.0
    m.update(torch.tensor([[0, 0, 0, 1]]))  # 0.25
    assert m.compute().item() == pytest.approx((0.5 + 1.0 + 0.25) / 3)  # 0.58333


def test_mean_at_k_rejects_wrong_k():
    m = MeanAtK(k=4)
    with pytest.raises(ValueError, match=r"\[P, 4\]"):
        m.update(torch.ones(2, 3))
    with pytest.raises(ValueError, match="k"):
        MeanAtK(k=0)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # `merged` gets states by merge, not update
def test_states_reduce_by_sum_as_across_ranks():
    # what DDP sync does: sum each state over ranks, then compute
    rank0, rank1 = MeanAtK(k=2), MeanAtK(k=2)
    rank0.update(torch.tensor([[1.0, 0.0]]))  # 0.5
    rank1.update(torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]))  # 1, 0, 1
    merged = MeanAtK(k=2)
    merged.merge_state(rank0)
    merged.merge_state(rank1)
    assert merged.prompts.item() == 4
    assert merged.compute().item() == pytest.approx(2.5 / 4)
    for m in (PassAtOne(), MeanAtK(k=2)):
        assert len(m._reductions) == 2 and all(f is dim_zero_sum for f in m._reductions.values())
