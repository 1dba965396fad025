"""Stage 3b, revise: a GroupReviser may regenerate scored groups from other prompts and replace them.

The module calls ``revise(reviser, trainer, module, batch, stats)`` once per step, after scoring and
before the observe stage. Replacement is row for row: a replaced group keeps its rows,
prompt index and round; its completions, rewards and reward components are the new
ones, and each row records the prompt it was generated from (``batch.generated_from``).
The loss still uses the pool prompt. Replaced and failed rollouts stay counted as
generated (``batch.discarded_rollouts`` / ``discarded_tokens``). A prompt swap (OC-GRPO-Fixed)
keeps the rollouts and changes the pool prompt the loss uses; each of its rows records the
prompt it was generated from.
"""

from __future__ import annotations

import time
from typing import Optional

import lightning.pytorch as pl
import torch

from lit_rlvr.selection import GroupReviser
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import Revision, RolloutBatch, RolloutStats


def revise(
    reviser: Optional[GroupReviser], trainer: Optional[pl.Trainer], host: SelectionHost, batch: RolloutBatch, stats: RolloutStats
) -> RolloutBatch:
    """Run the run's GroupReviser (None: there is none) on ``batch`` and apply its revision in place.

    The module passes its reviser, the trainer and itself (the ``SelectionHost`` the hook receives).
    """
    if reviser is None:
        return batch
    t0 = time.perf_counter()
    revision = reviser.revise(trainer, host, batch, stats)
    apply_revision(batch, revision)
    stats.extra["revise_seconds"] = time.perf_counter() - t0
    return batch


def apply_revision(batch: RolloutBatch, revision: Revision) -> None:
    """Replace each revised group's rows in place; count the replaced and failed rollouts as discarded.

    A ``PromptSwap`` changes no rollout: its rows record the prompt they were generated from (the
    pool prompt, x̃) and the loss prompt of that pool entry becomes the swap's (x).
    """
    n = len(batch)
    if batch.generated_from is None:
        batch.generated_from = [None] * n
    groups = batch.group_indices()
    for rep in revision.replacements:
        rows = groups[rep.pool_index].tolist()  # [n_g]
        if len(rows) != len(rep.completions):
            raise ValueError(
                f"a GroupReviser replaced pool prompt {rep.pool_index}'s {len(rows)} rollouts with {len(rep.completions)}"
            )
        for j, r in enumerate(rows):
            batch.discarded_rollouts += 1
            batch.discarded_tokens += len(batch.completions[r].token_ids)
            batch.completions[r] = rep.completions[j]
            batch.generated_from[r] = list(rep.prompt_token_ids)
        idx = torch.tensor(rows, dtype=torch.long)
        batch.rewards[idx] = rep.rewards.float()
        for name, values in batch.reward_components.items():
            values[idx] = rep.components[name].float()
    replaced = {rep.pool_index for rep in revision.replacements}
    for swap in revision.swaps:
        if swap.pool_index in replaced:
            raise ValueError(f"a GroupReviser both replaced and swapped the prompt of pool prompt {swap.pool_index}")
        rows = groups[swap.pool_index].tolist() if swap.pool_index in groups else []  # [n_g]
        generated_from = list(batch.prompt_token_ids[swap.pool_index])  # x̃: what the engine was given
        for r in rows:
            batch.generated_from[r] = list(generated_from)
        batch.prompt_token_ids[swap.pool_index] = list(swap.loss_prompt_token_ids)
    batch.discarded_rollouts += revision.discarded_rollouts
    batch.discarded_tokens += revision.discarded_tokens


