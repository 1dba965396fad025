"""Selector state loads strictly: a missing or unknown key fails naming the selector, its state key
and the key; keys a later version added load with their documented default."""

import numpy as np
import pytest

from lit_rlvr.callbacks import DPS, GRESO, PODS, SARA, VIGOR, DynamicSampling, MoPPS
from lit_rlvr.selection_toolkit import PromptTable, require_keys
from lit_rlvr.policy import pad_token_id
from lit_rlvr.selection import keep_top, top_positions
from tests.callbacks.fixtures import make_pool


@pytest.mark.parametrize("make", [GRESO, DPS, MoPPS, DynamicSampling, PODS, lambda: SARA(persist=True)])
def test_a_renamed_key_fails_naming_selector_and_key(make):
    selector = make()
    state = selector.state_dict()
    first = next(iter(state))
    renamed = {("renamed_" + k if k == first else k): v for k, v in state.items()}
    with pytest.raises(ValueError) as err:
        make().load_state_dict(renamed)
    message = str(err.value)
    assert type(selector).__name__ in message and selector.state_key in message
    assert repr(first) in message and repr("renamed_" + first) in message


@pytest.mark.parametrize("make", [GRESO, DPS, MoPPS, DynamicSampling, PODS, VIGOR])
def test_an_unknown_key_fails(make):
    with pytest.raises(ValueError, match="an unknown key 'extra'"):
        make().load_state_dict({**make().state_dict(), "extra": 1})


def test_a_missing_table_column_fails():
    dps = DPS()
    state = dps.state_dict()
    state["table"] = {k: v for k, v in state["table"].items() if k != "times"}
    with pytest.raises(ValueError, match=r"DPS .*table: the checkpoint's state has no key 'times'"):
        DPS().load_state_dict(state)


def test_keys_added_later_are_optional_with_their_default():
    ds = DynamicSampling()
    ds.underfilled_steps = 3
    old = {k: v for k, v in ds.state_dict().items() if k != "underfilled_steps"}  # before 19fa7bb
    resumed = DynamicSampling()
    resumed.underfilled_steps = 5
    resumed.load_state_dict(old)
    assert resumed.underfilled_steps == 0


def test_require_keys_message_lists_the_checkpoint_keys():
    with pytest.raises(ValueError) as err:
        require_keys("X (state key 'X{}')", {"a": 1, "c": 2}, ("a", "b"), optional=("d",))
    message = str(err.value)
    assert "no key 'b'" in message and "an unknown key 'c'" in message and "['a', 'c']" in message
    assert '"callbacks"' in message  # how to start the selector fresh


def test_prompt_table_round_trip():
    table = PromptTable({"n": (np.int64, 0)})
    table.set("n", np.array([3]), 7)
    again = PromptTable({"n": (np.int64, 0)})
    again.load_state_dict(table.state_dict())
    assert again.get("n", np.array([3])).tolist() == [7]


def test_top_positions_ties_keep_order():
    assert top_positions([0.5, 0.9, 0.9, 0.1], 3).tolist() == [1, 2, 0]
    assert top_positions([0.5, 0.1, 0.1, 0.9], 2, largest=False).tolist() == [1, 2]


def test_keep_top_narrows_only_a_pool_larger_than_b():
    pool = make_pool([10, 11, 12, 13], 2)
    eligible = np.arange(4)
    order = keep_top(pool, eligible, [0.1, 0.7, 0.3, 0.7])
    assert order.tolist() == [1, 3] and pool.keep.tolist() == [False, True, False, True]
    small = make_pool([10, 11], 2)
    keep_top(small, np.arange(2), [0.1, 0.7])
    assert small.keep.tolist() == [True, True]


def test_pad_token_id_pad_then_eos_then_error():
    class Tok:
        def __init__(self, pad, eos):
            self.pad_token_id, self.eos_token_id = pad, eos

    assert pad_token_id(Tok(5, 2)) == 5
    assert pad_token_id(Tok(None, 2)) == 2
    with pytest.raises(ValueError, match="neither a pad nor an EOS token"):
        pad_token_id(Tok(None, None))
