"""Rewards for stop tests, imported inside the sandboxed reward workers (so: the standard library only)."""

import time

# The rows of the tiny config's training set (configs/tiny.yaml, seed 0) that its first step draws. Each reward
# call runs in a fresh sandboxed process, so a reward cannot count its calls: it tells the steps apart by its input.
# If the data order ever changes, the sleep starts in step 1 and the stop test's "saved the state after step 1"
# check fails and says so.
TINY_STEP_1_ROWS = frozenset({25, 33, 47, 60})


def parity(completion: str, answer: str, metadata: dict) -> float:
    """The score every reward here gives when it answers: 1 for a completion of even length."""
    return float(len(completion) % 2 == 0)


def sleeps_after_step_1(completion: str, answer: str, metadata: dict) -> float:
    """``parity`` for the tiny config's step-1 rows; on any other row announces and sleeps 60 s."""
    if metadata.get("source_index") not in TINY_STEP_1_ROWS:
        print("sleepy reward: sleeping", flush=True)  # relayed to the trainer's log: the test's cue
        time.sleep(60)
    return parity(completion, answer, metadata)


def always_sleeps(completion: str, answer: str, metadata: dict) -> float:
    """Announces and sleeps 60 s on every call (with a short timeout_s: a reward that always times out)."""
    print("sleepy reward: sleeping", flush=True)
    time.sleep(60)
    return 0.0


def always_raises(completion: str, answer: str, metadata: dict) -> float:
    raise RuntimeError("the verifier is broken on purpose")
