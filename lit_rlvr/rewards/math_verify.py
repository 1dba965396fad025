"""Math correctness with Hugging Face ``math-verify``, under a hard time limit."""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

from lit_rlvr.rewards.answer import ANSWER_MODES, extract_answer
from lit_rlvr.rewards.base import AnswerReward, first_or_raise, outcomes_to_scores
from lit_rlvr.rewards.workers.pool import DEFAULT_TIMEOUT_S

_SILENCED = False


def _silence_math_verify() -> None:
    """math-verify warns once that its signal-based timeout is off; ours replaces it."""
    global _SILENCED
    if not _SILENCED:
        import math_verify.grader
        import math_verify.parser

        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        _SILENCED = True


def _parse(text: str) -> list:
    """``math_verify.parse`` without its signal-based timeout; retries LaTeX in ``$...$``.

    A bare ``\\frac{1}{2}`` or ``x+1`` without math delimiters is not found by
    math-verify's LaTeX extractor, so an empty parse is retried inside ``$...$``.
    """
    from math_verify import parse

    parsed = parse(text, parsing_timeout=None)
    if not parsed and "$" not in text:
        parsed = parse(f"${text}$", parsing_timeout=None)
    return parsed


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> list:
    return _parse(gold)  # GRPO scores G completions per reference: parse it once


def verify_math(gold: str, prediction: str) -> bool:
    """True when ``prediction`` is mathematically equal to ``gold`` per math-verify.

    Runs math-verify with its own (signal-based) timeouts disabled, so it works
    in any thread; it can therefore hang on pathological input, and
    ``MathVerifyReward`` runs it in a time-limited worker process.
    """
    from math_verify import verify

    _silence_math_verify()
    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return False
    pred_parsed = _parse(prediction)
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


class MathVerifyReward(AnswerReward):
    """1.0 when the completion's answer equals the reference mathematically, else 0.0.

    Uses ``math-verify`` (the verifier of Open-R1 and TRL's math rewards): it
    parses LaTeX and plain expressions into SymPy and compares them, so
    ``\\frac{1}{2}`` matches ``0.5``. The answer is taken from the completion with
    ``extract_answer(completion, extraction)``; if that finds nothing, the
    whole completion is given to math-verify, whose own extractor looks for a
    ``\\boxed{}`` or a final number. Parsing and comparison run in a worker
    process with a hard time limit, because SymPy can hang on inputs such as
    ``10^{10^{10^{10}}}``; a call that overruns scores 0 and is counted as a
    timeout.

    Args:
        timeout_s: hard time limit, in seconds, on scoring one completion.
        workers: sandboxed worker processes scoring a batch concurrently (default: up to 4).
        extraction: how to find the answer in the completion: ``"tag"``
            (last ``<answer>...</answer>``), ``"last_line"``, ``"full"`` or
            ``"last_number"``.
        weight: multiplier of this score in the total reward.
        name: key of this reward in logs; must differ from the other rewards'.
    """

    name = "math_verify"

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        extraction: str = "tag",
        workers: Optional[int] = None,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(weight=weight, name=name)
        # The warm-up runs in the zygote, so every call's fresh process inherits what it loaded: free text
        # ("no idea") takes math-verify's slowest first path (about 0.4 s of lazy set-up, then 0.01 s), which a
        # numeric warm-up leaves cold; warmed with it, every answer kind starts warm.
        self._start_workers(verify_math, extraction=extraction, modes=ANSWER_MODES, timeout_s=timeout_s, workers=workers,
                            preload=("math_verify",), warmup=("no idea", "\\frac{1}{2}"))

    def prediction(self, completion: str) -> str:
        """The text handed to math-verify: the extracted answer, else the whole completion."""
        extracted = extract_answer(completion, self.extraction)
        return completion if extracted is None else extracted

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        return first_or_raise(self.score_batch([completion], [answer], [metadata]))

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        args = [(str(a), self.prediction(c or "")) for c, a in zip(completions, answers)]
        return outcomes_to_scores(self._caller.call_many(args), "math-verify", self.timeout_s, lambda v: 1.0 if v else 0.0)
