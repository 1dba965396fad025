"""Callbacks the end-to-end tests add to fits by class path (``--trainer.callbacks+=tests.fit_callbacks.X``).

Kept apart from ``tests/helpers.py`` (reward functions), which reward workers import and which must stay
free of torch and Lightning.
"""

import os as _os

import lightning.pytorch as _pl
import torch as _torch

from lit_rlvr.selection import SelectionCallback as _SelectionCallback


class DumpSelectorState(_pl.Callback):
    """Records each step's pool keep mask (list it last, after the selectors) and, at the end,
    every selector's state_dict, to ``<dir>/rank<r>.pt``: what the DDP and resume tests compare."""

    def __init__(self, out_dir: str = "selector_dump") -> None:
        self.out_dir = out_dir
        self.keeps: dict[int, list[int]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.keeps[int(pl_module.steps_done)] = batch.ids[batch.keep].tolist()

    def on_train_end(self, trainer, pl_module) -> None:
        from lit_rlvr.selection import SelectionCallback

        states = {type(cb).__name__: cb.state_dict() for cb in trainer.callbacks if isinstance(cb, SelectionCallback)}
        _os.makedirs(self.out_dir, exist_ok=True)
        _torch.save({"states": states, "keeps": self.keeps}, _os.path.join(self.out_dir, f"rank{trainer.global_rank}.pt"))


class SkipEveryPrompt(_pl.Callback):
    """A pre-rollout selector that skips the whole pool on the given steps: an empty training step."""

    def __init__(self, steps: tuple[int, ...] = (1,)) -> None:
        self.steps = set(steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if int(pl_module.steps_done) in self.steps:
            batch.keep[:] = False


class SignalAtStep(_pl.Callback):
    """Sends this process ``signum`` (default SIGTERM) as training step ``step`` starts: a preemption mid-step
    (on every rank, or only on ``rank``)."""

    def __init__(self, step: int = 3, signum: int = 15, rank: int | None = None) -> None:
        self.step, self.signum, self.rank = step, signum, rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if int(pl_module.steps_done) == self.step and self.rank in (None, trainer.global_rank):
            _os.kill(_os.getpid(), self.signum)


GREEDY_PROMPT = [1, 422, 3102, 314, 216, 33, 1232, 216, 34, 47]
"""Token ids of a fixed prompt: what RecordShardsAndGreedy decodes greedily at the end of a fit."""


class RecordShardsAndGreedy(_pl.Callback):
    """At the end of training, writes ``<dir>/rank<r>.pt``: the fraction of the policy's elements this rank
    stores, whether every parameter is a DTensor (before and after a greedy generation), and the trained
    module's greedy tokens for GREEDY_PROMPT (what the sharded tests compare with DDP and the export)."""

    def __init__(self, out_dir: str = "shard_dump", max_new_tokens: int = 8) -> None:
        self.out_dir, self.max_new_tokens = out_dir, max_new_tokens

    def on_train_end(self, trainer, pl_module) -> None:
        from lit_rlvr.rollout import SamplingConfig
        from lit_rlvr.rollout.base import GenerationRequest
        from lit_rlvr.sharding import local_fraction

        def all_dtensor() -> bool:
            return all(hasattr(p, "to_local") for p in pl_module.policy.parameters())

        before = all_dtensor()
        (completions,) = pl_module.engine.generate(
            [GenerationRequest(prompt_token_ids=GREEDY_PROMPT, n=1)], SamplingConfig(0.0, 1.0, self.max_new_tokens)
        )
        record = {
            "local_fraction": local_fraction(pl_module.policy),
            "dtensor_before_generate": before,
            "dtensor_after_generate": all_dtensor(),
            "greedy": completions[0].token_ids,
        }
        _os.makedirs(self.out_dir, exist_ok=True)
        _torch.save(record, _os.path.join(self.out_dir, f"rank{trainer.global_rank}.pt"))



class DumpSurvivors(_SelectionCallback):
    """Records, per step, every rollout that reached the batch (prompt id, token ids): with a pruner,
    the pruning decisions. Saved at the end to ``<dir>/survivors_rank<r>.pt``."""

    def __init__(self, out_dir: str = "selector_dump") -> None:
        self.out_dir = out_dir
        self.steps: dict[int, list[tuple[int, tuple[int, ...]]]] = {}

    def on_rollouts_scored(self, trainer, pl_module, batch) -> None:
        self.steps[int(pl_module.steps_done)] = [(int(i), tuple(c.token_ids)) for i, c in zip(batch.prompt_ids.tolist(), batch.completions)]

    def state_dict(self):
        return {}

    def on_train_end(self, trainer, pl_module) -> None:
        _os.makedirs(self.out_dir, exist_ok=True)
        _torch.save(self.steps, _os.path.join(self.out_dir, f"survivors_rank{trainer.global_rank}.pt"))


class KillMidShardWrite(_pl.Callback):
    """kill -9 of the whole run (its process group) while rank 0 writes its shard of the ``save``-th checkpoint
    of global step ``step`` (ModelCheckpoint writes the step file first, then ``last.ckpt``): one tensor of
    the shard is on disk, the rest never will be."""

    def __init__(self, step: int = 2, save: int = 2) -> None:
        self.step, self.save, self.seen = step, save, 0

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if trainer.global_step != self.step or trainer.global_rank != 0:
            return
        self.seen += 1
        if self.seen != self.save:
            return
        import signal

        import torch.distributed.checkpoint.filesystem as fs

        write = fs._write_item

        def write_then_die(*args, **kwargs):
            result = write(*args, **kwargs)
            args[1].flush()  # the stream: this much of the shard reaches the file
            _os.killpg(_os.getpgid(0), signal.SIGKILL)
            return result

        fs._write_item = write_then_die
