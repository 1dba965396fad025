"""What a selection method may ask of the trainer beyond the record its hook is given.

Every hook of the contract (``lit_rlvr.selection``) receives ``(trainer, pl_module, record)``.
The record carries the step, seed, rank and group size (``StepContext``: ``pool.context``,
``batch.context``); ``pl_module`` is typed ``SelectionHost``, this short protocol, and a method
reads nothing else of it. The model work a method needs (a no-grad forward in eval mode,
generation and scoring) happens behind these members, in the trainer, so no method toggles the
policy's train/eval mode or calls it.

``GRPOModule`` (through ``PolicyModule``) and the simulator's ``SimModule`` implement it without
subclassing it; ``tests/test_selection_host.py`` checks both, and that every access a callback
makes on its module argument is a member below.

It sits at the bottom of the layers (docs/architecture.md) beside the contract: it names only
the records of ``lit_rlvr.types``.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from lit_rlvr.types import Completion, PromptPool, RolloutStats

__all__ = ["BatchHost", "SelectionHost", "batch_host_members", "host_members"]


class SelectionHost(Protocol):
    """The trainer as a selection method sees it: settings, prompt rendering, generation, forwards.

    It has no logging member: a method reports its metrics (``SelectionCallback.set_metrics``) and
    the module logs them with the step's."""

    accuracy_reward: str
    """Name of the reward whose score >= 1 counts as "correct" (``model.accuracy_reward``)."""

    rollout_settings: Any
    """``RolloutSettings`` (read only): sampling and ``max_new_tokens``, for set-up checks."""

    @property
    def group_size(self) -> int:
        """G, the configured rollouts per prompt (``model.rollout.num_generations``), for set-up checks; a step's own
        G is its record's ``group_size`` (a batch controller may change it)."""

    @property
    def hidden_size(self) -> int:
        """H, the policy's hidden size (0 while no policy is loaded, as in the simulator)."""

    @property
    def lockstep(self) -> bool:
        """True when a forward or a generation is a collective of every rank (FSDP2 sharding)."""

    def render_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a chat prompt, rendered as the rollout engine renders pool prompts."""

    def generate_and_score(
        self,
        pool: PromptPool,
        pool_index: Sequence[int],
        prompts: Sequence[list[int]],
        counts: Sequence[int],
        seed: int,
        stats: RolloutStats,
    ) -> tuple[list[list[Completion]], Any]:
        """ONE batched engine call: ``counts[k]`` samples of ``prompts[k]`` at the rollout sampling
        settings and ``seed``, scored against pool prompt ``pool_index[k]``'s answer.

        Returns the completions per prompt and the ``RewardResult`` (``total`` [Σ counts],
        ``components``); time and reward failures are added to ``stats``.
        """

    def completion_logprobs(self, prompts: Sequence[list[int]], completions: Sequence[list[int]]) -> torch.Tensor:
        """[m, L] float32 (CPU) log π(y_t | prompt, y_<t) of each completion under the current policy
        at the rollout temperature: no-grad forwards in eval mode, micro-batched as the loss is;
        L = the longest completion, padding positions are 0."""

    def last_hidden_states(
        self, rows: Sequence[Sequence[int]], batch_size: int, layer: int = -1, padding: str = "left"
    ) -> torch.Tensor:
        """[n, H] float32 (CPU) hidden state (``hidden_states[layer]``) at each token row's last token:
        no-grad forwards of the policy in eval mode, ``batch_size`` rows at a time.

        ``padding``: "left" (with position ids from the mask: ARRoL's partial rollouts) or
        "right" (LEEPS's prompt embeddings). The two agree up to float rounding; each method
        keeps the one it was measured with.
        """


class BatchHost(Protocol):
    """The trainer as a batch controller (``AdaptiveBatch``) sees it: the step, the noise meter, the optimizer.

    A controller steers the run rather than the rollouts, so it reads measurements a selection method
    never needs; it reads nothing else of the module (``tests/test_selection_host.py`` checks it)."""

    steps_done: int
    """Optimizer steps completed (the next step's index)."""

    @property
    def group_size(self) -> int:
        """G, the configured rollouts per prompt (``model.rollout.num_generations``)."""

    device: torch.device
    """Where the module's tensors live (for the ranks' reductions)."""

    @property
    def noise_meter(self) -> Any:
        """The gradient noise-scale meter (``lit_rlvr.update.noise_meter.NoiseMeter``; its ``settings`` and
        ``tracker``), or None when the update has none."""

    def noise_unmeasurable(self) -> str | None:
        """Why this run's noise scale cannot be measured (off, FSDP2, gradient checkpointing, ...); None: it can."""

    def optimizers(self) -> Any:
        """Lightning's optimizer (or list): the controller sets Adam's β₂ in its parameter groups."""


def _members(protocol: type) -> frozenset[str]:
    names = set(protocol.__annotations__)
    names.update(n for n, v in vars(protocol).items() if not n.startswith("_") and (callable(v) or isinstance(v, property)))
    return frozenset(names)


def host_members() -> frozenset[str]:
    """The names ``SelectionHost`` declares (attributes, properties and methods)."""
    return _members(SelectionHost)


def batch_host_members() -> frozenset[str]:
    """The names ``BatchHost`` declares."""
    return _members(BatchHost)
