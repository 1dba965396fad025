"""The parts of a real run that touch a network or Lightning, as stand-ins driven by ``SimPolicy``.

* ``SimSource`` / ``SimTokenizer``: prompts "sim <i>" for the real PromptDataModule, rendered to the
  single token id i.
* ``SimEngine`` (the ``RolloutEngine`` protocol): a completion's code is ``id · 4096 + k``, k counting
  that prompt's fresh rollouts this step; its text is the code and its first token id is the code, so
  a partial rollout continued by the real pruning path (``rollout.pruning``) decodes to the same code.
  Every rollout is ``cfg.completion_tokens`` long; a call with a smaller ``max_new_tokens`` returns
  partial rollouts ("length"), and a request with ``partial_token_ids`` returns the rest ("stop").
  With ``return_hidden_states`` each completion carries ``SimPolicy.head_features`` of its signal.
* ``SimReward``: 1 if the rollout with that code is correct, else 0.
* ``SimTrainer``: the ``Trainer`` attributes the module and the selectors read.
* ``SimUpdater``: stage 7, simulated: the in-gradient groups move the simulated skill.
* ``SimModule``: ``GRPOModule`` whose ``training_step`` runs unchanged, with a ``SimUpdater`` as its
  updater and logging simulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from lit_rlvr.bench.sim.config import MAX_ROLLOUTS_PER_PROMPT
from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.data.sources import PromptSource
from lit_rlvr.module import GRPOModule, RolloutSettings
from lit_rlvr.rewards.base import RewardFunction
from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig
from lit_rlvr.types import Completion, RolloutBatch

__all__ = ["SimEngine", "SimModule", "SimReward", "SimSource", "SimTokenizer", "SimTrainer", "SimUpdater"]


class SimSource(PromptSource):
    """Train prompts "sim <i>" (i = 0..N−1) for the real PromptDataModule; validation is computed exactly."""

    def __init__(self, num_prompts: int) -> None:
        super().__init__()
        self.num_prompts = int(num_prompts)

    def _load_splits(self) -> tuple[list[tuple[str, str, dict]], list[tuple[str, str, dict]]]:
        train = [(f"sim {i}", "1", {}) for i in range(self.num_prompts)]
        return train, [("sim-val 0", "1", {})]


def prompt_id(text: str) -> int:
    """The id i of a prompt "sim <i>" (its last word)."""
    return int(text.split()[-1])


class SimTokenizer:
    """Renders a prompt "sim <i>" to the single token id i; decodes a completion to its code (first token)."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = 0

    def __call__(self, text: str, **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": [prompt_id(text)]}

    def decode(self, token_ids: Sequence[int], **kwargs: Any) -> str:
        return str(int(token_ids[0])) if len(token_ids) else ""


class SimEngine:
    """A ``RolloutEngine`` over ``SimPolicy``: completions ``cfg.completion_tokens`` long, code ``id · 4096 + k``."""

    def __init__(self, sim: SimPolicy) -> None:
        self.sim = sim
        self.length = int(sim.cfg.completion_tokens)
        self._step = -1
        self._counts = np.zeros(sim.cfg.num_prompts, dtype=np.int64)
        self._pad = [0] * self.length  # shared tails: token ids after the first are never read
        self._logprobs = [[0.0] * n for n in range(self.length + 1)]  # shared per length
        self.calls = 0

    def _completion(self, code: int, n_tokens: int, finish: str, first: bool) -> Completion:
        tokens = ([code] + self._pad[: n_tokens - 1]) if first else self._pad[:n_tokens]
        return Completion(tokens, self._logprobs[n_tokens], finish, str(code) if first else "")

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[list[Completion]]:
        if self.sim.step != self._step:
            self._counts[:] = 0
            self._step = self.sim.step
        self.calls += 1
        out: list[list[Completion]] = []
        for req in requests:
            if req.partial_token_ids:  # a pruner's survivor: the rest of that rollout, same code
                done = len(req.partial_token_ids)
                n_tokens = min(self.length - done, sampling.max_new_tokens)
                finish = "stop" if done + n_tokens == self.length else "length"
                out.append([self._completion(0, n_tokens, finish, first=False) for _ in range(req.n)])
                continue
            pid = int(req.prompt_token_ids[0])
            k0 = int(self._counts[pid])
            self._counts[pid] += req.n
            n_tokens = min(self.length, sampling.max_new_tokens)
            finish = "stop" if n_tokens == self.length else "length"
            base = pid * MAX_ROLLOUTS_PER_PROMPT
            group = [self._completion(base + k, n_tokens, finish, first=True) for k in range(k0, k0 + req.n)]
            if sampling.return_hidden_states and group:
                ks = np.arange(k0, k0 + req.n)
                features = self.sim.head_features(self.sim.head_signal(np.full(req.n, pid), ks, self.sim.step))  # [n, 2]
                for c, f in zip(group, torch.from_numpy(features)):
                    c.hidden_state = f
            out.append(group)
        return out

    def sync_weights(self, policy: Any) -> None:
        return None


class SimReward(RewardFunction):
    """1 if the simulated rollout with code ``id · 4096 + k`` is correct, else 0 (drawn from the simulated policy)."""

    name = "accuracy"

    def __init__(self, sim: SimPolicy) -> None:
        super().__init__()
        self.sim = sim

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        return float(self.score_batch([completion], [answer], [metadata])[0])

    def score_batch(self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]) -> list:
        if not completions:
            return []
        code = np.fromiter(map(int, completions), dtype=np.int64, count=len(completions))
        ids, ks = np.divmod(code, MAX_ROLLOUTS_PER_PROMPT)
        return self.sim.outcomes(ids, ks, self.sim.step).astype(np.float64).tolist()


@dataclass
class SimTrainer:
    """The few ``Trainer`` attributes the module and the selectors read."""

    callbacks: list
    datamodule: Any
    log_dir: Optional[str] = None
    world_size: int = 1
    global_rank: int = 0
    is_global_zero: bool = True
    strategy: Any = None


class _NoScheduler:
    def get_last_lr(self) -> list[float]:
        return [0.0]


class SimUpdater:
    """Stage 7, simulated (``GRPOModule.updater``): the in-gradient groups (kept, non-zero advantage) move the skill."""

    def __init__(self, sim: SimPolicy, rollout: RolloutSettings) -> None:
        self.sim = sim
        self.rollout = rollout
        self.last_gain = 0.0
        """The skill gain of the last update (``SimPolicy.learn``)."""

    def run(self, batch: RolloutBatch) -> dict[str, float]:
        adv = batch.advantages if batch.advantages is not None else torch.zeros(len(batch))
        in_grad = batch.keep & (adv != 0)  # [N]
        pool_idx, inverse, n = torch.unique(batch.prompt_index[in_grad], return_inverse=True, return_counts=True)  # [K], [n], [K]
        correct = (batch.rewards[in_grad] > 0.5).double()  # [n] SimReward is 0 or 1
        successes = torch.zeros(len(pool_idx), dtype=torch.float64).index_add_(0, inverse, correct)  # [K]
        ids = batch.pool.ids[pool_idx].numpy()
        self.last_gain = self.sim.learn(ids, n.numpy(), successes.numpy(), batch.pool.batch_size, self.rollout.num_generations)
        return {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0, "seconds": 0.0}


class SimModule(GRPOModule):
    """``GRPOModule`` whose ``training_step`` runs unchanged; only the update (``SimUpdater``) and logging are simulated."""

    def __init__(self, sim: SimPolicy, group_size: int, seed: int) -> None:
        super().__init__(
            rollout=RolloutSettings(num_generations=int(group_size), max_new_tokens=int(sim.cfg.completion_tokens)),
            rewards=[SimReward(sim)],
            seed=int(seed),
            checkpoint_every_n_steps=None,
        )
        self.sim = sim
        self._engine = SimEngine(sim)
        self.tokenizer = SimTokenizer()
        self.logged: dict[str, float] = {}
        self.updater = SimUpdater(sim, self.rollout_settings)

    @property
    def last_gain(self) -> float:
        """The skill gain of the last (simulated) update."""
        return self.updater.last_gain

    def lr_schedulers(self) -> Any:  # type: ignore[override]
        return _NoScheduler()

    def log_dict(self, dictionary: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self.logged = {k: float(v) for k, v in dictionary.items()}

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        return None
