"""Voting over k sampled candidates of one prompt: majority vote and weighted vote (pure functions).

Test-time use of ARRoL's quality head ("Prune as You Generate", arXiv 2603.24840; docs/methods.md,
"ARRoL": "the head also weights votes at test time"): each candidate's vote counts its weight
instead of 1. ``lit_rlvr.arrol_vote`` supplies the weights (the head's calibrated p̂).

Rules, shared by both votes:

* a candidate whose extracted answer is ``None`` casts no vote; when no candidate votes, the vote
  has no answer and scores 0;
* an answer's score is the sum of its voters' weights (1 each for the majority vote);
* the winners are the answers whose score equals the highest (up to 1e-9 relative);
* the vote's accuracy is the mean correctness of the winners: the expected accuracy of breaking
  a tie uniformly at random, so a tie needs no seed and the number is the same on every run;
* an answer's correctness is the mean correctness of its voters (they agree whenever the
  correctness reward is a function of the extracted answer, as reasoning-gym's and math-verify's are).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

__all__ = ["answer_scores", "vote_accuracy", "vote_winners"]


def answer_scores(answers: Sequence[Optional[str]], weights: Optional[Sequence[float]] = None) -> dict[str, float]:
    """Each distinct non-None answer's summed weight (weight 1 per voter when ``weights`` is None), in first-seen order."""
    if weights is not None and len(weights) != len(answers):
        raise ValueError(f"{len(answers)} answers but {len(weights)} weights")
    scores: dict[str, float] = {}
    for i, a in enumerate(answers):
        if a is None:
            continue
        w = 1.0 if weights is None else float(weights[i])
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"vote weights must be finite and >= 0, got {w} for candidate {i}")
        scores[a] = scores.get(a, 0.0) + w
    return scores


def vote_winners(answers: Sequence[Optional[str]], weights: Optional[Sequence[float]] = None) -> list[str]:
    """The answers with the highest score (several on a tie; empty when no candidate has an answer)."""
    scores = answer_scores(answers, weights)
    if not scores:
        return []
    top = max(scores.values())
    return [a for a, s in scores.items() if math.isclose(s, top, rel_tol=1e-9, abs_tol=1e-12)]


def vote_accuracy(
    answers: Sequence[Optional[str]], correct: Sequence[float], weights: Optional[Sequence[float]] = None
) -> float:
    """Accuracy of the vote over one prompt's candidates: mean correctness of the winning answers (0 with no answer)."""
    if len(correct) != len(answers):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness values")
    winners = vote_winners(answers, weights)
    if not winners:
        return 0.0
    per_answer: dict[str, list[float]] = {}
    for a, c in zip(answers, correct):
        if a is not None:
            per_answer.setdefault(a, []).append(float(c))
    return sum(sum(per_answer[w]) / len(per_answer[w]) for w in winners) / len(winners)
