"""ComputeMeter: one compute unit for every G2D stage, so "4× less compute" can be checked.

The unit is the *token pass*: one token through one forward pass of the policy. With
N parameters a token pass costs about 2N FLOPs, a backward pass about twice a forward,
so a token trained on (forward + backward) counts 3 token passes. Per stage:

- ``generated_tokens``: sampled tokens (decoding; 1 pass each);
- ``prefill_tokens``: prompt tokens processed to sample (1 pass each; the HF engine
  prefills a prompt once per candidate, and this counts what it does);
- ``train_tokens``: prompt + response tokens through forward and backward (3 passes);
- ``forward_tokens``: tokens through forward-only passes for the loss (the reference, or
  old log-probs; 1 pass each);
- ``wall_seconds``: the stage's fit or predict loop, validation included.

``token_passes = generated + prefill + forward + 3 × train``. Validation generation is
not counted in token passes (every method is measured the same way; it is in wall time).

The meter reads what each stage already produces: GRPO's scored rollouts (the observe
hook: every scored rollout is counted as trained, exact for plain GRPO, an upper bound
under pre-backward filters), DPO's ``train_tokens``/``forward_tokens`` step outputs, and
the harvest's per-prompt records. Counts are summed over ranks and written as JSON at the
end of the stage (rank 0). Its state is checkpointed, so a resumed stage keeps counting.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch

from lit_rlvr.selection import SelectionCallback
from lit_rlvr.types import RolloutBatch

TRAIN_PASSES = 3
"""Token passes of a token trained on: one forward, a backward of about two."""


@dataclass
class Compute:
    """Compute of one stage (or a sum of stages) in token counts and seconds."""

    generated_tokens: int = 0
    prefill_tokens: int = 0
    train_tokens: int = 0
    forward_tokens: int = 0
    wall_seconds: float = 0.0

    @property
    def token_passes(self) -> int:
        return self.generated_tokens + self.prefill_tokens + self.forward_tokens + TRAIN_PASSES * self.train_tokens

    def __add__(self, other: "Compute") -> "Compute":
        return Compute(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "token_passes": self.token_passes}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Compute":
        return Compute(**{k: d.get(k, 0) for k in asdict(Compute())})


class ComputeMeter(SelectionCallback):
    """Counts a stage's compute (see the module docstring) and writes it to ``path``.

    An observe-stage callback for GRPO (it selects nothing). Args:
        path: the JSON file (default: ``<trainer.default_root_dir>/compute.json``).
        stage: a name for the stage, written beside the counts.
    """

    def __init__(self, path: Optional[str] = None, stage: str = "") -> None:
        self.path = path
        self.stage = stage
        self.compute = Compute()
        self._t0: Optional[float] = None

    def _state_key_fields(self) -> dict[str, Any]:
        return {"stage": self.stage}

    # GRPO: every scored rollout
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: Any, batch: RolloutBatch) -> None:
        completion = batch.completion_lengths  # [N]
        prompt = torch.tensor([len(batch.prompt_token_ids[int(p)]) for p in batch.prompt_index], dtype=torch.long)
        loss = pl_module.loss_settings
        trained = int((completion + prompt).sum())
        self.compute.generated_tokens += int(completion.sum())
        self.compute.prefill_tokens += int(prompt.sum())
        self.compute.train_tokens += trained * loss.num_iterations
        self.compute.forward_tokens += trained * (int(loss.kl_coef > 0) + int(loss.num_iterations > 1))

    # DPO: the step's own counts
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if isinstance(outputs, dict) and "train_tokens" in outputs:
            self.compute.train_tokens += int(outputs["train_tokens"])
            self.compute.forward_tokens += int(outputs.get("forward_tokens", 0))

    # harvest: per-prompt records
    def on_predict_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        for record in outputs or []:
            self.compute.generated_tokens += int(getattr(record, "generated_tokens", 0))
            self.compute.prefill_tokens += int(getattr(record, "prompt_tokens", 0))

    def metrics(self) -> dict[str, float]:
        return {"token_passes": float(self.compute.token_passes)}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._t0 = time.perf_counter()

    def on_predict_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._t0 = time.perf_counter()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._finish(trainer)

    def on_predict_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._finish(trainer)

    def _finish(self, trainer: pl.Trainer) -> None:
        if self._t0 is not None:
            self.compute.wall_seconds += time.perf_counter() - self._t0
            self._t0 = None
        total = self.compute
        if trainer.world_size > 1:
            counts = torch.tensor([total.generated_tokens, total.prefill_tokens, total.train_tokens, total.forward_tokens], dtype=torch.float64)
            counts = trainer.strategy.reduce(counts.to(trainer.strategy.root_device), reduce_op="sum").cpu().tolist()
            total = Compute(*[int(c) for c in counts], wall_seconds=total.wall_seconds)
        if trainer.is_global_zero:
            path = Path(self.path or Path(trainer.default_root_dir) / "compute.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"stage": self.stage, **total.to_dict()}, indent=2) + "\n")

    def state_dict(self) -> dict[str, Any]:
        elapsed = time.perf_counter() - self._t0 if self._t0 is not None else 0.0
        return {**asdict(self.compute), "wall_seconds": self.compute.wall_seconds + elapsed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.compute = Compute.from_dict(state_dict)
