"""Rewards for stop tests, imported inside the sandboxed reward workers (so: the standard library only)."""

import time

_calls = 0


def sleeps_after_16_calls(completion: str, answer: str, metadata: dict) -> float:
    """Fast for a worker's first 16 calls (one tiny-config step with workers: 1), then announces and sleeps 60 s."""
    global _calls
    _calls += 1
    if _calls > 16:
        print("sleepy reward: sleeping", flush=True)  # relayed to the trainer's log: the test's cue
        time.sleep(60)
    return float(len(completion) % 2 == 0)


def always_sleeps(completion: str, answer: str, metadata: dict) -> float:
    """Announces and sleeps 60 s on every call (with a short timeout_s: a reward that always times out)."""
    print("sleepy reward: sleeping", flush=True)
    time.sleep(60)
    return 0.0


def always_raises(completion: str, answer: str, metadata: dict) -> float:
    raise RuntimeError("the verifier is broken on purpose")
