"""PromptDataModule.resize: pools of a new size mid-fit, continuing the epoch; saved with the position."""

import pytest
import torch

from lit_rlvr.data import PromptDataModule, ReasoningGymSource

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


@pytest.fixture(scope="module")
def source():
    return ReasoningGymSource(task_config=ONE_DIGIT, train_size=60, val_size=10, seed=42)


def test_without_a_change_pools_are_the_fixed_size_cut_of_each_epoch(source):
    """The fixed-batch arithmetic: pool k is slice k % (N // P) of permutation k // (N // P)."""
    dm = PromptDataModule(source, batch_size=4, pool_multiple=1.5)  # P = 6, 10 pools an epoch
    for k in (0, 3, 9, 10, 27):
        e, j = divmod(k, 10)
        assert dm.pool_ids(k).tolist() == dm._permutation(e)[j * 6 : (j + 1) * 6].tolist()
        assert dm.batch_size_at(k) == 4
    assert "batch_changes" not in dm.state_dict()


def test_a_resize_continues_the_epoch_without_skipping_or_repeating(source):
    dm = PromptDataModule(source, batch_size=4)  # P = 4, 15 pools an epoch
    dm.resize(7, at_pool=3)  # pools 0-2 hold ids 0..11 of epoch 0; pool 3 on: 7 prompts from offset 12
    served = [dm.pool_ids(k).tolist() for k in range(9)]
    assert [len(p) for p in served] == [4, 4, 4, 7, 7, 7, 7, 7, 7]
    epoch0 = [i for p in served[:9] for i in p][:12 + 7 * 6]  # 12 + 42 = 54 ids of epoch 0, then 6 left (< 7)
    assert epoch0 == dm._permutation(0)[:54].tolist()
    assert [dm.epoch_of(k) for k in (8, 9)] == [0, 1]  # pool 9 starts epoch 1 (6 left over, as with drop_last)
    assert dm.pool_ids(9).tolist() == dm._permutation(1)[:7].tolist()
    assert dm.batch_size_at(2) == 4 and dm.batch_size_at(3) == 7


def test_a_smaller_pool_uses_the_rest_of_the_epoch(source):
    dm = PromptDataModule(source, batch_size=8)  # P = 8: 7 pools an epoch, 4 ids left over
    dm.resize(2, at_pool=7)  # pool 6 ended at 56: pools 7 and 8 take ids 56..59 of epoch 0
    assert dm.pool_ids(7).tolist() == dm._permutation(0)[56:58].tolist()
    assert dm.pool_ids(8).tolist() == dm._permutation(0)[58:60].tolist()
    assert dm.pool_ids(9).tolist() == dm._permutation(1)[:2].tolist()


def test_a_revised_change_replaces_the_one_at_the_same_pool_and_a_past_one_is_refused(source):
    dm = PromptDataModule(source, batch_size=4)
    dm.resize(6, at_pool=2)
    dm.resize(5, at_pool=2)
    assert dm.batch_changes == [(2, 0, 8, 5)]
    dm.resize(4, at_pool=2)  # back to the size before: no change left
    assert dm.batch_changes == []
    dm.resize(6, at_pool=5)
    with pytest.raises(ValueError, match="precedes the last change"):
        dm.resize(2, at_pool=4)
    with pytest.raises(ValueError, match="larger than the train split"):
        dm.resize(61, at_pool=6)


def test_the_changes_travel_in_the_state_and_a_pool_already_cut_is_never_changed(source):
    dm = PromptDataModule(source, batch_size=4, pool_multiple=1.5)
    it = iter(dm.train_dataloader())
    first, prefetched = next(it), next(it)  # the loader cut pool 1 ahead of training
    with pytest.raises(ValueError, match="pool 1 was already cut .* from pool 2 on: decide a pool ahead"):
        dm.resize(2, at_pool=1)
    dm.resize(2, at_pool=2)
    assert (first.batch_size, prefetched.batch_size, len(prefetched)) == (4, 4, 6)
    pool2 = next(it)
    assert pool2.batch_size == 2 and pool2.ids.tolist() == dm.pool_ids(2).tolist() == dm._permutation(0)[12:15].tolist()
    assert dm.pool(2).ids.tolist() == pool2.ids.tolist() and dm.pool(2).batch_size == 2

    resumed = PromptDataModule(source, batch_size=4, pool_multiple=1.5)
    resumed.load_state_dict({**dm.state_dict(), "pools_consumed": 2})
    assert torch.equal(resumed.state_dict()["batch_changes"], dm.state_dict()["batch_changes"])
    for k in range(1, 25):
        assert resumed.pool_ids(k).tolist() == dm.pool_ids(k).tolist()
    assert next(iter(resumed.train_dataloader())).batch_size == 2


def test_a_regroup_sets_the_group_size_pools_carry_and_travels_in_the_state(source):
    dm = PromptDataModule(source, batch_size=4)
    assert dm.group_size_at(5) == 0 and dm.pool(5).group_size == 0  # 0: the configured G
    dm.regroup(8, at_pool=3)
    dm.regroup(4, at_pool=6)
    assert [dm.group_size_at(k) for k in (0, 2, 3, 5, 6, 9)] == [0, 0, 8, 8, 4, 4]
    assert dm.pool(3).group_size == 8 and dm.pool(2).group_size == 0
    assert dm.pool_ids(4).tolist() == PromptDataModule(source, batch_size=4).pool_ids(4).tolist()  # prompts unchanged
    dm.regroup(2, at_pool=6)  # a revised decision for the same pool replaces it
    assert dm.group_size_at(6) == 2 and len(dm._group_changes) == 2
    with pytest.raises(ValueError, match="precedes the last change"):
        dm.regroup(8, at_pool=5)
    with pytest.raises(ValueError, match="at least 2"):
        dm.regroup(1, at_pool=9)
    again = PromptDataModule(source, batch_size=4)
    again.load_state_dict(dm.state_dict())
    assert [again.group_size_at(k) for k in range(10)] == [dm.group_size_at(k) for k in range(10)]
    assert "group_changes" not in PromptDataModule(source, batch_size=4).state_dict()  # no change: no key
    stream = iter(dm.train_dataloader())
    served = [next(stream) for _ in range(7)]
    assert [p.group_size for p in served] == [0, 0, 0, 8, 8, 8, 2]
    with pytest.raises(ValueError, match="already cut"):
        dm.regroup(16, at_pool=6)  # pool 6 was served: a change applies from pool 7 on
    dm.regroup(16, at_pool=7)
    assert next(stream).group_size == 16
