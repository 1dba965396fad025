"""Every record passed between the stages of a training step.

``PromptPool`` is what the data module serves: the candidate prompts of one step
(``pool_multiple × B`` of them) with a keep mask that pre-rollout selectors narrow.
``RolloutBatch`` is every rollout generated for that pool, scored, with the keep
mask that pre-backward filters narrow and the advantages computed on what is kept.
Between them travel the rollout loop's records: ``RolloutState`` (what an allocator
plans from), ``PartialRollouts`` (what a pruner decides on), ``RolloutStats`` (what
the rollout stage cost), and a reviser's ``Revision`` of ``GroupReplacement`` s.

They live here, at the bottom of the layers (docs/architecture.md), so that the
selection contract, the rollout loop, the module and the methods can all name them
without importing each other. Shapes in comments: P = prompts in the pool, N =
rollouts generated this step, n = rows of one round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from lit_rlvr.advantages import REWARD_TOL, is_zero_variance


@dataclass(frozen=True)
class StepContext:
    """Where in the run a record was made: what a selector keys its seeded draws and history on.

    The module attaches one to every ``PromptPool`` it trains on (before the pre-rollout hooks
    run), and a ``RolloutBatch`` carries its pool's, so hooks read the step, seed, rank and group
    size from the record they are given instead of from the module. A record made outside a
    training step (a test, a script) has the default: step 0 of seed 0 on one rank.
    """

    step: int = 0
    """Training steps (pools consumed) before this one: the data position, restored on resume."""
    seed: int = 0
    """The run's seed (``model.seed``), for ``seeded_generator``."""
    rank: int = 0
    """This process's global rank."""
    world_size: int = 1
    """Ranks in the run."""
    group_size: int = 0
    """G, this step's rollouts per prompt: the pool's (a batch controller's) or the configured
    ``model.rollout.num_generations`` (0: unknown)."""


@dataclass
class PromptPool:
    """Candidate prompts for one training step (columnar)."""

    ids: torch.Tensor
    """[P] int64 stable prompt ids: selectors key their per-prompt state on these."""
    messages: list[list[dict[str, str]]]
    """[P] chat messages of each prompt (system and user turns), rendered by the module."""
    answers: list[str]
    """[P] reference answers."""
    metadata: list[dict[str, Any]]
    """[P] per-prompt extras for the reward (a reasoning-gym entry, a dataset row)."""
    batch_size: int
    """B: how many prompt groups the step should train on."""
    keep: Optional[torch.Tensor] = None
    """[P] bool: prompts still eligible for rollout; pre-rollout selectors narrow it."""
    solutions: Optional[list[Optional[str]]] = None
    """[P] reference solution text per prompt (OC-GRPO's guided prompts); None entries: none."""
    context: StepContext = field(default_factory=StepContext)
    """The step this pool is trained at; set by the module before the pre-rollout hooks."""
    group_size: int = 0
    """G for this pool's prompts as a batch controller set it (``PromptDataModule.regroup``); 0: the configured
    ``model.rollout.num_generations``. The step reads G from ``context.group_size``, which the module sets from it."""

    def __post_init__(self) -> None:
        self.ids = torch.as_tensor(self.ids, dtype=torch.long)
        if self.keep is None:
            self.keep = torch.ones(len(self.ids), dtype=torch.bool)
        if self.solutions is None:
            self.solutions = [None] * len(self.ids)
        sizes = {len(self.ids), len(self.messages), len(self.answers), len(self.metadata), len(self.keep), len(self.solutions)}
        if len(sizes) != 1:
            raise ValueError(f"PromptPool columns differ in length: {sorted(sizes)}")

    def __len__(self) -> int:
        return len(self.ids)

    def to(self, device: torch.device | str) -> "PromptPool":
        """Lightning moves batches to the device; prompt state stays on the CPU."""
        return self

    def extend(self, other: "PromptPool") -> list[int]:
        """Append ``other``'s prompts (fresh draws for a refill); returns their new pool indices."""
        start = len(self)
        self.ids = torch.cat([self.ids, other.ids])
        self.messages = self.messages + other.messages
        self.answers = self.answers + other.answers
        self.metadata = self.metadata + other.metadata
        self.keep = torch.cat([self.keep, other.keep])
        self.solutions = self.solutions + other.solutions
        return list(range(start, len(self)))

    def eligible(self) -> list[int]:
        """Pool indices still kept, in pool order (the order rollouts are drawn in)."""
        return torch.nonzero(self.keep, as_tuple=False).flatten().tolist()


@dataclass
class Completion:
    """One sampled continuation of one prompt, as every rollout engine returns it."""

    token_ids: list[int]
    """Generated token ids, without the prompt and without padding (EOS included if emitted)."""
    logprobs: list[float]
    """Per-token log-probabilities under the sampling distribution, len == len(token_ids)."""
    finish_reason: str
    """"stop" (EOS or a stop string) or "length" (hit max_new_tokens: truncated)."""
    text: str = ""
    """Decoded completion text (special tokens skipped)."""
    hidden_state: Optional[torch.Tensor] = None
    """[H] float32 last-layer hidden state at the last token, when asked for
    (``SamplingConfig.return_hidden_states``) and the engine gives it; else None."""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class RolloutBatch:
    """All rollouts of one step, in generation order (rows of one group need not be adjacent)."""

    pool: PromptPool
    prompt_index: torch.Tensor
    """[N] int64 index into ``pool`` of each rollout's prompt."""
    prompt_token_ids: list[list[int]]
    """[P] tokenized prompt of each pool entry (empty for prompts never rolled out)."""
    completions: list[Completion]
    """[N] the generated completions."""
    rewards: torch.Tensor
    """[N] float32 total reward of each rollout."""
    round: torch.Tensor
    """[N] int64 generation round the rollout came from (0-based; −1: carried in from an earlier step)."""
    keep: torch.Tensor
    """[N] bool: rollouts that enter the gradient; pre-backward filters narrow it."""
    reward_components: dict[str, torch.Tensor] = field(default_factory=dict)
    """name -> [N] float32 per-reward-function scores (before weighting)."""
    advantages: Optional[torch.Tensor] = None
    """[N] float32, filled by the advantage stage (0 for rollouts not kept)."""
    token_weights: Optional[list[torch.Tensor]] = None
    """Optional [N] list of [L_i] float32 per-token loss weights (OC-GRPO); None = all ones."""
    generated_from: Optional[list[Optional[list[int]]]] = None
    """Optional [N] prompt tokens a row was generated from when that is not its loss prompt
    (``prompt_token_ids``): a GroupReviser replaced its group, or swapped its loss prompt. None (or a
    None entry): generated from its own loss prompt."""
    discarded_rollouts: int = 0
    """Rollouts generated this step that are no longer rows (groups a GroupReviser replaced, its failed tries)."""
    discarded_tokens: int = 0
    """Completion tokens of ``discarded_rollouts``: generated and counted, never trained on."""
    carried: Optional[torch.Tensor] = None
    """Optional [N] bool: rows an allocator carried in from an earlier step (``RolloutState.carry``):
    trained on like any row, but not generated this step, so the accounting leaves them out of
    ``rollouts/generated`` and ``tokens/generated``. None: no row is carried."""

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def carried_mask(self) -> torch.Tensor:
        """[N] bool rows carried in from an earlier step (all False when ``carried`` is None)."""
        return self.carried if self.carried is not None else torch.zeros(len(self), dtype=torch.bool)

    @property
    def context(self) -> StepContext:
        """The step these rollouts were generated at (their pool's)."""
        return self.pool.context

    @property
    def prompt_ids(self) -> torch.Tensor:
        """[N] stable prompt id of each rollout."""
        return self.pool.ids[self.prompt_index]

    @property
    def truncated(self) -> torch.Tensor:
        """[N] bool: completions that hit max_new_tokens."""
        return torch.tensor([c.truncated for c in self.completions], dtype=torch.bool)

    @property
    def completion_lengths(self) -> torch.Tensor:
        """[N] int64 generated tokens per rollout."""
        return torch.tensor([len(c.token_ids) for c in self.completions], dtype=torch.long)

    def group_indices(self, mask: Optional[torch.Tensor] = None) -> dict[int, torch.Tensor]:
        """pool index -> [n_g] rollout rows of that prompt (restricted to ``mask`` if given)."""
        rows = torch.arange(len(self)) if mask is None else torch.nonzero(mask).flatten()
        groups: dict[int, list[int]] = {}
        for r in rows.tolist():
            groups.setdefault(int(self.prompt_index[r]), []).append(r)
        return {p: torch.tensor(rs, dtype=torch.long) for p, rs in groups.items()}


# --------------------------------------------------------------------------- the rollout stage's records


class _PoolContextFields:
    """``step``, ``seed`` and ``group_size`` read from ``self.pool.context`` (the step context is carried once)."""

    pool: PromptPool

    @property
    def group_size(self) -> int:
        """G, this step's rollouts per prompt (the pool's ``context.group_size``)."""
        return self.pool.context.group_size

    @property
    def step(self) -> int:
        """Training step index (pools consumed before this one; the pool's ``context.step``)."""
        return self.pool.context.step

    @property
    def seed(self) -> int:
        """The run's seed, for ``seeded_generator`` (the pool's ``context.seed``)."""
        return self.pool.context.seed


@dataclass
class RolloutState(_PoolContextFields):
    """What the rollout loop has generated so far this step, per pool prompt (P = len(pool))."""

    pool: PromptPool
    """The step's pool; its ``context`` carries the step, seed and group size (read here as properties)."""
    round: int = 0
    """Generation rounds finished so far."""
    rewards: list[list[float]] = field(default_factory=list)
    """[P] rewards of each prompt's rollouts so far, in generation order."""
    drawer: Optional[Callable[[int], PromptPool]] = None
    """Serves n fresh prompts for a refill (None: the pool is all there is)."""
    drawn: int = 0
    """Prompts drawn into the pool this step."""
    carried: list[tuple[int, "CarriedGroup"]] = field(default_factory=list)
    """(pool index, group) of each group carried in this step (``carry``), in carry order."""

    def __post_init__(self) -> None:
        if not self.rewards:
            self.rewards = [[] for _ in range(len(self.pool))]

    def carry(self, group: "CarriedGroup") -> int:
        """Append ``group``'s prompt to the pool with its earlier rollouts; returns its pool index.

        The rollouts join the step's batch as rows of that prompt (``RolloutBatch.carried``), after
        the generated ones; their rewards count in ``rewards`` from now on, so the prompt's group is
        the carried rows plus whatever later rounds generate for it. A replay buffer (Pilot-Commit)
        uses it to train on rollouts it generated at an earlier step.
        """
        (index,) = self.pool.extend(group.prompt)
        self.rewards.append([float(r) for r in group.rewards.tolist()])
        self.carried.append((index, group))
        return index

    def draw(self, n: int) -> list[int]:
        """Append up to n fresh prompts to the pool (deterministic per step); returns their pool indices."""
        if self.drawer is None or n <= 0:
            return []
        new = self.pool.extend(self.drawer(n))
        self.rewards.extend([] for _ in new)
        self.drawn += len(new)
        return new

    @property
    def counts(self) -> torch.Tensor:
        """[P] int64 rollouts generated so far per prompt."""
        return torch.tensor([len(r) for r in self.rewards], dtype=torch.long)

    def reward_mean(self) -> torch.Tensor:
        """[P] float32 mean reward so far (0 where none)."""
        return torch.tensor([sum(r) / len(r) if r else 0.0 for r in self.rewards], dtype=torch.float32)

    def reward_var(self) -> torch.Tensor:
        """[P] float32 population variance of each prompt's rewards so far.

        Exactly 0 where fewer than 2 or zero-variance (``is_zero_variance``), so every
        saturated group ties at 0 whatever float noise the sums leave (VIGOR ranks by this).
        """
        out = []
        for r in self.rewards:
            if len(r) < 2 or is_zero_variance(max(r) - min(r)):
                out.append(0.0)
                continue
            m = sum(r) / len(r)
            out.append(sum((x - m) ** 2 for x in r) / len(r))
        return torch.tensor(out, dtype=torch.float32)

    def is_effective(self, epsilon: float = REWARD_TOL) -> torch.Tensor:
        """[P] bool: prompts with rewards so far that are not zero-variance (``is_zero_variance``)."""
        return torch.tensor([bool(r) and not is_zero_variance(max(r) - min(r), epsilon) for r in self.rewards], dtype=torch.bool)

    def unused(self) -> list[int]:
        """Pool indices still eligible (``pool.keep``) and not rolled out yet, in pool order."""
        counts = self.counts
        return [i for i in self.pool.eligible() if counts[i] == 0]


@dataclass
class CarriedGroup:
    """Rollouts of one prompt generated at an earlier step, carried into this step's batch (``RolloutState.carry``)."""

    prompt: PromptPool
    """The prompt, as a pool of one (its id, messages, answer, metadata, solution)."""
    prompt_token_ids: list[int]
    """The prompt the rollouts were generated from (rendered then)."""
    completions: list[Completion]
    """[n] the earlier completions, with the log-probs they were sampled with (``Completion.logprobs``)."""
    rewards: torch.Tensor
    """[n] float32 total rewards they were scored with."""
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    """name -> [n] float32 per-reward-function scores."""
    step: int = 0
    """The training step they were generated at."""

    def __len__(self) -> int:
        return len(self.completions)


@dataclass
class PartialRollouts(_PoolContextFields):
    """One round's rollouts after ``detect_tokens`` tokens, as the rollout loop hands them to a pruner (n rows).

    Rows that stopped before ``detect_tokens`` are complete and already scored (``finished``,
    ``rewards``); the others are partial (reward NaN) and are continued only if the pruner keeps them.
    """

    pool: PromptPool
    prompt_index: torch.Tensor
    """[n] int64 pool index of each rollout's prompt."""
    prompt_token_ids: list[list[int]]
    """[n] the rendered prompt of each row."""
    completions: list[Completion]
    """[n] tokens generated so far (at most ``detect_tokens``)."""
    finished: torch.Tensor
    """[n] bool: the rollout stopped before ``detect_tokens``: complete and scored."""
    rewards: torch.Tensor
    """[n] float32 true reward of finished rows; NaN for partial ones."""
    hidden: Optional[torch.Tensor]
    """[n, H] float32 last-layer hidden state at each row's last token, when the engine gave it (else None)."""
    round: int = 0
    """Generation rounds finished before this one."""

    @property
    def context(self) -> StepContext:
        """The step these rollouts are generated at (their pool's): step, seed, rank, group size."""
        return self.pool.context

    def __len__(self) -> int:
        return len(self.completions)


@dataclass
class RolloutStats:
    """What one rollout stage cost and how it ended."""

    rounds: int = 0
    hit_round_cap: bool = False
    rollout_seconds: float = 0.0
    reward_seconds: float = 0.0
    reward_errors: int = 0
    reward_timeouts: int = 0
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class GroupReplacement:
    """A regenerated group that replaces every rollout of pool prompt ``pool_index``, row for row."""

    pool_index: int
    completions: list[Completion]
    """[n_g] the new completions, as many as the group has rows."""
    rewards: torch.Tensor
    """[n_g] float32 total rewards."""
    components: dict[str, torch.Tensor]
    """name -> [n_g] float32 per-reward-function scores."""
    prompt_token_ids: list[int]
    """The prompt they were generated from (not the pool prompt: the loss still uses that)."""


@dataclass
class PromptSwap:
    """The loss trains pool prompt ``pool_index``'s rows on another prompt than the one they were generated from.

    No rollout changes: the rows were generated from the pool prompt (a guided prompt x̃ served as
    data, OC-GRPO-Fixed); after the swap ``RolloutBatch.prompt_token_ids[pool_index]`` is
    ``loss_prompt_token_ids`` (the plain prompt x) and each row records x̃ in
    ``generated_from``, exactly as a ``GroupReplacement`` leaves a replaced group.
    """

    pool_index: int
    loss_prompt_token_ids: list[int]
    """The prompt the loss (and every later stage) uses for these rows."""


@dataclass
class Revision:
    """What a GroupReviser did this step: replacements, prompt swaps, and the rollouts it generated and threw away."""

    replacements: list[GroupReplacement] = field(default_factory=list)
    swaps: list[PromptSwap] = field(default_factory=list)
    """Groups kept as generated whose loss prompt changes (no rollout is discarded)."""
    discarded_rollouts: int = 0
    """Rollouts it generated that replace nothing (failed tries): counted as generated."""
    discarded_tokens: int = 0
    """Their completion tokens."""
