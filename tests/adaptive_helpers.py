"""A recorder for the AdaptiveBatch fits (tests/callbacks/test_adaptive_batch_fit.py), importable by path."""

import os

import lightning.pytorch as pl
import torch


class RecordBatches(pl.Callback):
    """Per step: the pool's B and ids, its G, and the loss normaliser next to the rows, tokens and groups it normalises.
    At the end, with the controller's state and Adam's beta2, to ``<dir>/batches_rank<r>.pt``."""

    def __init__(self, out_dir: str = "batch_dump") -> None:
        self.out_dir = out_dir
        self.pools: dict[int, tuple[int, list[int]]] = {}
        self.norms: dict[int, dict[str, float]] = {}
        self.groups: dict[int, int] = {}

    def on_fit_start(self, trainer, pl_module) -> None:
        updater, recorder = pl_module.updater, self
        normalizer = updater.normalizer

        def recorded(tensors):
            out = normalizer(tensors)
            units, rows_per_group = torch.unique(tensors.units, return_counts=True)
            mean_advantage = [float(tensors.advantages[tensors.units == u].mean()) for u in units.tolist()]
            recorder.norms[int(pl_module.steps_done)] = {
                "num_tokens": out.num_tokens, "num_sequences": out.num_sequences, "rows": float(len(tensors)),
                "tokens": float(tensors.completion_mask.sum()), "groups": float(len(units)),
                "rows_per_group": rows_per_group.tolist(), "max_mean_advantage": max(map(abs, mean_advantage), default=0.0),
            }
            return out

        updater.normalizer = recorded

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.pools[int(pl_module.steps_done)] = (int(batch.batch_size), batch.ids.tolist())
        self.groups[int(pl_module.steps_done)] = int(batch.context.group_size)  # G as the step's hooks read it

    def on_train_end(self, trainer, pl_module) -> None:
        from lit_rlvr.callbacks import AdaptiveBatch

        (controller,) = [cb for cb in trainer.callbacks if isinstance(cb, AdaptiveBatch)]
        opt = pl_module.optimizers()
        betas = [tuple(g["betas"]) for g in getattr(opt, "optimizer", opt).param_groups]
        os.makedirs(self.out_dir, exist_ok=True)
        torch.save({"pools": self.pools, "norms": self.norms, "state": controller.state_dict(), "betas": betas,
                    "changes": trainer.datamodule.batch_changes, "groups": self.groups,
                    "group_changes": list(trainer.datamodule._group_changes)},
                   os.path.join(self.out_dir, f"batches_rank{trainer.global_rank}.pt"))


class Regroup(pl.Callback):
    """After step ``step``, the data module serves ``group_size`` rollouts per prompt from the first pool not yet cut
    (``PromptDataModule.regroup``): a G change mid-fit, as a batch controller makes one."""

    def __init__(self, step: int = 1, group_size: int = 8) -> None:
        self.step, self.group_size = step, group_size

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if int(pl_module.steps_done) == self.step + 1:  # step `step` has just finished
            trainer.datamodule.regroup(self.group_size, at_pool=self.step + 2)
