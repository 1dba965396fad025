"""Fake prompt pools and scored rollout batches for the selector tests (no model, no rewards)."""

import torch

from lit_rlvr.types import Completion, PromptPool, RolloutBatch, StepContext


def make_pool(ids, batch_size):
    """A pool of prompts with these ids (questions "q<id>") and ``batch_size`` B."""
    n = len(ids)
    return PromptPool(
        ids=torch.as_tensor(ids),
        messages=[[{"role": "user", "content": f"q{i}"}] for i in ids],
        answers=["a"] * n,
        metadata=[{} for _ in range(n)],
        batch_size=batch_size,
    )


def with_context(pool, group_size=0, step=0, seed=0, rank=0):
    """``pool`` at this step of a run (its ``context``: what the rollout loop and its records read), returned."""
    pool.context = StepContext(step=step, seed=seed, rank=rank, group_size=group_size)
    return pool


def make_batch(pool, groups):
    """A scored batch over ``pool``: ``groups`` maps a pool index to its rollouts' rewards."""
    prompt_index, rewards = [], []
    for p, rs in groups.items():
        prompt_index += [p] * len(rs)
        rewards += rs
    n = len(rewards)
    return RolloutBatch(
        pool=pool,
        prompt_index=torch.tensor(prompt_index, dtype=torch.long),
        prompt_token_ids=[[] for _ in range(len(pool))],
        completions=[Completion([1], [0.0], "stop") for _ in range(n)],
        rewards=torch.tensor(rewards, dtype=torch.float32),
        round=torch.zeros(n, dtype=torch.long),
        keep=torch.ones(n, dtype=torch.bool),
    )


def at_step(record, module):
    """``record`` (a PromptPool or RolloutBatch) carrying the step context of a fake ``module``
    (``steps_done``, ``seed``), as GRPOModule attaches it to the records of a real step."""
    pool = getattr(record, "pool", record)
    pool.context = StepContext(step=int(getattr(module, "steps_done", 0)), seed=int(getattr(module, "seed", 0)))
    return record
