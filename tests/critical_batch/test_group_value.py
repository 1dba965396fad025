"""The group-value arithmetic (lit_rlvr.critical_batch.group_value): each group's norm and cosines."""

import math

import pytest
import torch

from lit_rlvr.critical_batch.group_value import group_rows, squared_norm, total


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a.double() @ b.double() / (a.double().norm() * b.double().norm()))


def test_group_rows_are_the_cosines_of_the_flattened_gradients():
    gen = torch.Generator().manual_seed(0)
    stacks = [torch.randn(3, 5, generator=gen), torch.randn(3, 2, generator=gen)]  # 3 groups, 2 parameters
    stacks[0][2], stacks[1][2] = 0.0, 0.0  # group 2 carried no gradient
    heldout = [torch.randn(5, generator=gen), torch.randn(2, generator=gen)]
    step = total(stacks)
    flat = torch.cat(stacks, dim=1)  # [3, 7]
    S, H = torch.cat(step), torch.cat(heldout)
    rows = group_rows(stacks, [4, 9, 11], step, heldout, in_step=True)
    assert [r["unit"] for r in rows] == [4, 9, 11] and [r["informative"] for r in rows] == [1.0, 1.0, 0.0]
    for k in range(2):
        h = flat[k]
        assert rows[k]["norm"] == pytest.approx(float(h.norm()), rel=1e-6)
        assert rows[k]["cos_step"] == pytest.approx(_cos(h, S), rel=1e-6)
        assert rows[k]["cos_rest"] == pytest.approx(_cos(h, S - h), rel=1e-5)  # its own part left out
        assert rows[k]["cos_heldout"] == pytest.approx(_cos(h, H), rel=1e-6)
        assert rows[k]["proj_heldout"] == pytest.approx(float(h.double() @ H.double() / H.double().norm()), rel=1e-6)
    assert rows[2]["norm"] == 0 and math.isnan(rows[2]["cos_step"]) and math.isnan(rows[2]["cos_heldout"])
    outside = group_rows(stacks, [4, 9, 11], step, None, in_step=False)  # a candidate: S does not hold it
    assert outside[0]["cos_rest"] == pytest.approx(_cos(flat[0], S), rel=1e-6) and math.isnan(outside[0]["cos_heldout"])
    assert squared_norm(step) == pytest.approx(float(S.double().pow(2).sum()), rel=1e-9)
