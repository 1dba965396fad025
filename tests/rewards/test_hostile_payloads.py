"""The hostile payloads really execute code when a scorer runs them unsandboxed.

This is the positive control for the sandbox tests: the scorers are called
directly in this process (no worker processes), and each payload must create its
marker file. If one stops doing so (a new reasoning-gym version that no longer
evaluates answers, say), a sandbox test using it would pass without testing anything.
"""

from __future__ import annotations

import pytest
import reasoning_gym

from lit_rlvr.rewards import ReasoningGymReward
from lit_rlvr.rewards.answer import extract_answer

from .hostile_payloads import EVALUATING_TASKS, payload_answer


def _rebuilt_entry(entry: dict) -> tuple[str, dict]:
    """The (task, entry) that ``ReasoningGymReward`` hands the scorer, built by its own code.

    The instance is not initialised, so no worker processes are started; ``_task``
    reads only ``self.dataset``.
    """
    reward = ReasoningGymReward.__new__(ReasoningGymReward)
    reward.dataset = None
    return reward._task(entry["answer"], entry["metadata"])


@pytest.mark.parametrize("task", EVALUATING_TASKS)
@pytest.mark.parametrize("returns", ["none", "raises"])
def test_payload_executes_unsandboxed(task, returns, tmp_path):
    entry = reasoning_gym.create_dataset(task, size=1, seed=0)[0]
    dataset, rebuilt = _rebuilt_entry(entry)
    assert dataset == task
    assert set(rebuilt) == {"question", "answer", "metadata"}

    marker = tmp_path / f"{task}.marker"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    if returns == "raises":
        code = f"[{code}, 1 // 0]"  # raises after the side effect
    answer = payload_answer(task, rebuilt, code)

    # The payload arrives intact through the reward's answer extraction.
    assert extract_answer(f"<think>x</think><answer>{answer}</answer>", "tag") == answer
    assert extract_answer(f"work\n{answer}\n", "last_line") == answer

    assert not marker.exists()
    try:
        score = reasoning_gym.get_score_answer_fn(task)(answer=answer, entry=rebuilt)
    except Exception:
        score = None
    assert marker.exists(), f"{task}: scoring the payload did not run the code"
    assert score is None or score < 1.0


def test_unknown_task_has_no_payload():
    with pytest.raises(ValueError):
        payload_answer("basic_arithmetic", {"answer": "1", "metadata": {}}, "None")
