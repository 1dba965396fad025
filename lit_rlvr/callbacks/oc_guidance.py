"""OC-GRPO's pure parts (arXiv 2607.19313; reference code AgPriyank/OC-GRPO): the solution prefix,
the guided prompt x̃, the prefix cascade and the importance weight. No model, no trainer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)
"""The reference's prefix cascade: shares of the solution, by characters, tried in order."""

PARTIAL_INSTRUCTION = (
    "Here is a partial reference solution to the problem above. "
    "Complete the rest of the solution step by step and give the final answer in the format the problem asks for."
)
"""After a partial prefix. The reference ends "...output the final answer within \\boxed{}." (its
prompts ask for a boxed answer); here the problem's own answer format stands."""

FULL_INSTRUCTION = (
    "Here is the full reference solution. Verify it, show your work step by step, "
    "and give the final answer in the format the problem asks for."
)
"""After the whole solution (fraction 1.0), as the reference frames it (same change of format)."""


def solution_prefix(solution: str, fraction: float) -> str:
    """The first ``fraction`` of ``solution`` by characters, cut back to the last word boundary.

    As the reference's ``get_solution_prefix``: ``[asy]`` diagram blocks are dropped and the text
    stripped; fraction >= 1 gives all of it; otherwise the cut starts at ``max(1, int(fraction · len))``
    and moves back to the nearest space, newline or tab at or before it (none: cut at the target),
    and trailing whitespace is dropped.
    """
    text = re.sub(r"\[asy\].*?\[/asy\]", "", solution, flags=re.DOTALL).strip()
    target = max(1, int(fraction * len(text)))
    if fraction >= 1.0 or target >= len(text):
        return text
    cut = max(text.rfind(ws, 0, target + 1) for ws in " \n\t")
    return text[: cut if cut > 0 else target].rstrip()


def guided_messages(
    messages: list[dict[str, str]],
    prefix: str,
    fraction: float,
    partial_instruction: str = PARTIAL_INSTRUCTION,
    full_instruction: str = FULL_INSTRUCTION,
) -> list[dict[str, str]]:
    """The guided prompt x̃: the pool prompt's messages with its last user turn wrapped as
    "Problem: … / Partial reference solution: … / instruction" (fraction 1: "Reference solution: …").

    The prefix sits in the user turn; the response stays the model's own tokens. Other turns
    (a system prompt with the answer format) are kept as they are.
    """
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    label, instruction = ("Reference solution", full_instruction) if fraction >= 1.0 else ("Partial reference solution", partial_instruction)
    content = f"Problem: {messages[last]['content']}\n\n{label}: {prefix}\n\n{instruction}"
    return [*messages[:last], {"role": "user", "content": content}, *messages[last + 1 :]]


@dataclass
class Attempt:
    """One guided group at one fraction: n_g scored rollouts."""

    correct: torch.Tensor
    """[n_g] bool: rollouts correct by the accuracy reward."""
    tokens: int
    """Completion tokens generated."""
    payload: object = None
    """What the caller needs to replace the group (completions, rewards, prompt tokens)."""


@dataclass
class CascadeResult:
    solved: dict[int, tuple[float, Attempt]]
    """candidate key -> (fraction, the attempt) at the first fraction with a correct rollout."""
    unsolved: list[int]
    """Candidate keys with no correct rollout at any fraction: their groups stay as they were."""
    discarded_rollouts: int
    """Rollouts of failed attempts (generated, counted, not used)."""
    discarded_tokens: int
    calls: int
    """Batched attempts made (one per fraction with candidates left)."""


def climb_cascade(
    solutions: dict[int, str],
    fractions: Sequence[float],
    attempt: Callable[[int, float, list[tuple[int, str]]], list[Attempt]],
) -> CascadeResult:
    """OC-GRPO-Adaptive's cascade over all-wrong groups ``solutions`` (key -> reference solution).

    For each fraction in order, ONE call ``attempt(level, fraction, [(key, prefix), ...])`` regenerates
    every group still unsolved (keys in ascending order); a group stops at the first fraction where
    any rollout is correct. A group whose prefix at a fraction is empty skips that fraction.
    """
    remaining = sorted(solutions)
    solved: dict[int, tuple[float, Attempt]] = {}
    discarded_rollouts = discarded_tokens = calls = 0
    for level, fraction in enumerate(fractions):
        todo = [(k, solution_prefix(solutions[k], fraction)) for k in remaining]
        todo = [(k, p) for k, p in todo if p]
        if not todo:
            continue
        attempts = attempt(level, fraction, todo)
        calls += 1
        for (k, _), a in zip(todo, attempts):
            if bool(a.correct.any()):
                solved[k] = (fraction, a)
            else:
                discarded_rollouts += len(a.correct)
                discarded_tokens += a.tokens
        remaining = [k for k in remaining if k not in solved]
        if not remaining:
            break
    return CascadeResult(solved, remaining, discarded_rollouts, discarded_tokens, calls)


def importance_weights(
    logp_plain: torch.Tensor, logp_guided: torch.Tensor, gamma: float = 1.0, low: float = 0.01, high: float = 1.0
) -> torch.Tensor:
    """w_t = clamp(exp(γ · (log π_old(y_t|x) − log π_old(y_t|x̃))), low, high), elementwise.

    The per-token correction of OC-GRPO (reference: ``is_correction_mode: per_token``,
    ``is_correction_clamp_min: 0.01``): a token the guide made likelier than the plain prompt
    would have is down-weighted; w never exceeds 1.
    """
    return torch.exp(gamma * (logp_plain.double() - logp_guided.double())).clamp(low, high).float()
