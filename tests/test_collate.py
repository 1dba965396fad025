"""left_pad: the one left-padding helper shared by HF generation and the warm-up."""

import torch

from lit_rlvr.collate import left_pad


def test_left_pad_right_aligns_sequences_with_a_mask():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.dtype == torch.long and mask.dtype == torch.long
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
