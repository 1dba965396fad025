"""Idle zygotes left by a closed caller serve the next caller with the same settings, and only that one."""

import os

import pytest

from lit_rlvr.rewards import TimeLimitedCaller
from lit_rlvr.rewards.workers import parked
from tests.rewards import helpers


@pytest.fixture(autouse=True)
def _none_kept():
    parked.kill_all()
    yield
    parked.kill_all()


def _used_then_closed(**kwargs) -> int:
    caller = TimeLimitedCaller(helpers.add, timeout_s=10, workers=1, **kwargs)
    assert caller.call(1, 2) == (True, 3, False)
    pid = caller.worker_pid
    caller.close()
    return pid


def test_a_new_caller_with_the_same_settings_takes_the_closed_callers_zygote():
    pid = _used_then_closed()
    assert parked.kept() == 1
    again = TimeLimitedCaller("tests.rewards.helpers:add", timeout_s=3, workers=1)  # the limit is the trainer's side
    try:
        assert again.call(2, 3) == (True, 5, False)
        assert (again.worker_pid, again.starts, again.reused) == (pid, 1, 1)
        assert again.sandbox is not None and parked.kept() == 0
    finally:
        again.close()


def test_other_settings_start_their_own_zygote():
    pid = _used_then_closed()
    other = TimeLimitedCaller(helpers.add, timeout_s=10, workers=1, preload=("json",))
    try:
        assert other.call(1, 1) == (True, 2, False)
        assert other.worker_pid != pid and other.reused == 0
        assert parked.kept() == 1  # still kept for its own settings
    finally:
        other.close()
    assert parked.kept() == 2


def test_a_zygote_that_timed_out_is_killed_not_kept():
    sleeper = TimeLimitedCaller(helpers.sleep_then, timeout_s=0.5, workers=1)
    assert sleeper.call(30, 1.0).timed_out
    sleeper.close()
    assert parked.kept() == 0


def test_what_one_callers_call_wrote_is_gone_for_the_next_caller():
    writer = TimeLimitedCaller(helpers.write_file_reward, timeout_s=10, workers=1)
    assert writer.call("", "", {"path": "left-behind.txt"}).value == 1.0  # in the zygote's working directory
    pid = writer.worker_pid
    writer.close()
    reader = TimeLimitedCaller(helpers.write_file_reward, timeout_s=10, workers=1)
    try:
        assert reader.call("", "", {"path": "other.txt"}).value == 1.0
        assert reader.worker_pid == pid
        workdir = reader._slots[0].workdir
        assert workdir is not None and os.listdir(workdir) == []  # emptied after each call, whoever made it
    finally:
        reader.close()


def test_at_most_max_parked_are_kept_the_oldest_killed_first(monkeypatch):
    monkeypatch.setattr(parked, "MAX_PARKED", 1)
    first = _used_then_closed()
    second = _used_then_closed(preload=("json",))
    assert parked.kept() == 1
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)
    os.kill(second, 0)


def test_keeping_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(parked, "MAX_PARKED", 0)
    pid = _used_then_closed()
    assert parked.kept() == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_forked_copy_of_the_trainer_never_takes_its_parents_zygote():
    _used_then_closed()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        caller = TimeLimitedCaller(helpers.add, timeout_s=10, workers=1)
        taken = parked.take(caller._settings_key())
        os.write(write, b"taken" if taken is not None else b"none")
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    assert os.read(read, 16) == b"none"
    os.close(read)
    assert parked.kept() == 1
