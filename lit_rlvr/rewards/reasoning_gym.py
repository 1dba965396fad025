"""Correctness of reasoning-gym tasks, scored by reasoning-gym's own verifiers."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from lit_rlvr.rewards.answer import ANSWER_MODES, extract_answer
from lit_rlvr.rewards.base import AnswerReward, first_or_raise, outcomes_to_scores
from lit_rlvr.rewards.workers.pool import DEFAULT_TIMEOUT_S

_SCORERS: dict[str, Callable[..., float]] = {}


def _scorer(dataset: str) -> Callable[..., float]:
    """reasoning-gym's ``score_answer`` of a dataset, built once per process.

    ``get_score_answer_fn`` instantiates the dataset with its default config,
    which some tasks make expensive, so it is cached.
    """
    fn = _SCORERS.get(dataset)
    if fn is None:
        import reasoning_gym

        fn = reasoning_gym.get_score_answer_fn(dataset)
        _SCORERS[dataset] = fn
    return fn


def score_reasoning_gym(dataset: str, extracted: str, entry: dict[str, Any]) -> float:
    """reasoning-gym's score of ``extracted`` for ``entry`` (``question``, ``answer``, ``metadata``)."""
    return float(_scorer(dataset)(answer=extracted, entry=entry))


class ReasoningGymReward(AnswerReward):
    """Scores a completion with the verifier of the reasoning-gym task it came from.

    Every reasoning-gym dataset ships a ``score_answer(answer, entry)`` that
    knows its task (exact match, numeric tolerance, a solver for puzzles,
    partial credit); this reward extracts the answer from the completion and
    calls it. The task is read from ``metadata["source_dataset"]``, which every
    reasoning-gym entry's metadata carries, so one reward serves a mixture of
    tasks. The entry handed to the verifier is rebuilt from the prompt's
    reference ``answer`` and ``metadata`` (plus ``metadata["question"]`` when
    present). No answer found scores 0.0.

    Verifiers run in sandboxed worker processes (``TimeLimitedCaller``): some
    evaluate the answer as Python (``sympy.parse_expr``), and some hang on
    answers like ``9**9**9**9``. A call over ``timeout_s`` scores 0 and is
    counted as a timeout; metadata must be picklable.

    Args:
        extraction: how to find the answer in the completion: ``"tag"``
            (last ``<answer>...</answer>``), ``"last_line"``, ``"full"`` or
            ``"last_number"``.
        dataset: task name to use when an entry's metadata has no
            ``source_dataset``.
        timeout_s: hard time limit, in seconds, per completion.
        workers: worker processes scoring a batch concurrently (default: up to 4).
        weight: multiplier of this score in the total reward.
        name: key of this reward in logs; must differ from the other rewards'.
    """

    name = "reasoning_gym"

    def __init__(
        self,
        extraction: str = "tag",
        dataset: Optional[str] = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: Optional[int] = None,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(weight=weight, name=name)
        self.dataset = dataset
        self._start_workers(score_reasoning_gym, extraction=extraction, modes=ANSWER_MODES, timeout_s=timeout_s,
                            workers=workers, preload=("reasoning_gym",))

    def _task(self, answer: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        dataset = metadata.get("source_dataset") or self.dataset
        if not dataset:
            raise ValueError(
                "ReasoningGymReward: metadata has no 'source_dataset' and no `dataset` was configured"
            )
        entry = {"question": metadata.get("question", ""), "answer": answer, "metadata": metadata}
        return str(dataset), entry

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        extracted = extract_answer(completion, self.extraction)
        if extracted is None:
            return 0.0
        dataset, entry = self._task(answer, metadata)
        return first_or_raise(self._call([(dataset, extracted, entry)]))

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        out: list[float | BaseException | None] = [None] * len(completions)
        todo: list[int] = []
        args: list[tuple] = []
        for i, (c, a, m) in enumerate(zip(completions, answers, metadata)):
            try:
                extracted = extract_answer(c, self.extraction)
                if extracted is None:
                    out[i] = 0.0
                    continue
                dataset, entry = self._task(a, m)
                args.append((dataset, extracted, entry))
                todo.append(i)
            except Exception as e:
                out[i] = e
        for i, r in zip(todo, self._call(args) if args else []):
            out[i] = r
        return out  # type: ignore[return-value]

    def _call(self, args: list[tuple]) -> list[float | BaseException]:
        return outcomes_to_scores(self._caller.call_many(args), "reasoning-gym scoring", self.timeout_s)
