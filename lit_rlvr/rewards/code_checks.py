"""Assert-style tests that the trainer decides: their expected values never reach the program's process.

A ``{"code": ...}`` test runs after the program in the program's own interpreter,
so anything that interpreter reports can be forged: the program can write the
runner's reply itself and exit, make ``exec`` a no-op, return an object equal to
everything, or read the asserts from its callers' frames. ``decide`` therefore
splits, in the trainer, each test whose every ``assert`` is a top-level statement
of one of the forms

* ``assert E == L`` or ``assert L == E``, ``L`` a literal (``ast.literal_eval``),
* ``assert E is True``, ``assert E is False``, ``assert E is None``,
* ``assert E`` or ``assert not E``,

where ``E`` holds no comparison: the worker receives the test with each such
assert replaced by ``__lit_rlvr_check__(E, mode)`` (the literal, the polarity and
the assert's message left out), records ``encode(E, mode)`` for each and answers a
digest of them; the trainer compares it with the digest of the expected ones, which
never left it. The program still chooses the values (they are its answers) but
cannot see what they are compared with, so a pass it did not earn needs a 32-bit
digest collision against a value it does not know. ``encode`` makes values equal
under Python's ``==`` encode alike (``1 == 1.0 == True``, dicts and sets in any
order); values of other types than numbers, strings, bytes, ``None``, lists,
tuples, dicts and sets encode as ``?`` and fail.
"""

from __future__ import annotations

import ast
import hashlib
import json
import numbers
from typing import Any, Optional

__all__ = ["CHECK", "decide", "encode", "digest"]

CHECK = "__lit_rlvr_check__"
"""The name the worker binds to its recorder before it runs a decided test."""
_NOT_LITERAL = object()


def _number(v: Any) -> str:
    if isinstance(v, numbers.Integral):  # bool too: True == 1
        return "i" + format(int(v), "x")
    if isinstance(v, numbers.Real):
        f = float(v)
        return "i" + format(int(f), "x") if f.is_integer() else "f" + repr(f)
    c = complex(v)
    return _number(c.real) if c.imag == 0 else "c" + repr(c)


def _canon(v: Any) -> str:
    """Text that is the same for two values exactly when Python's ``==`` holds (for the types it knows)."""
    if v is None:
        return "N"
    if isinstance(v, str):
        return "s" + json.dumps(str(v))
    if isinstance(v, (bytes, bytearray)):
        return "b" + bytes(v).hex()
    if isinstance(v, numbers.Number):
        return _number(v)
    if isinstance(v, list):
        return "[" + ",".join(_canon(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ",".join(_canon(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ",".join(sorted(_canon(k) + ":" + _canon(x) for k, x in v.items())) + "}"
    if isinstance(v, (set, frozenset)):
        return "<" + ",".join(sorted(_canon(x) for x in v)) + ">"
    return "?"


def encode(value: Any, mode: str) -> str:
    """What a check records of ``value``: ``"eq"`` (``_canon``), ``"is"`` (``True``/``False``/``None``) or ``"truth"``."""
    if mode == "is":
        return "T" if value is True else "F" if value is False else "N" if value is None else "?"
    if mode == "truth":
        return "T" if value else "F"
    return _canon(value)


def digest(records: list[str]) -> str:
    """8 hex digits of a test's records, in order: the worker answers it, the trainer compares."""
    text = f"{len(records)}\x1e" + "\x1e".join(records)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _plain(expr: ast.expr) -> bool:
    """``expr`` holds no comparison (which could carry an expected value into the program's process)."""
    return not any(isinstance(n, ast.Compare) for n in ast.walk(expr))


def _split(test: ast.expr) -> Optional[tuple[ast.expr, str, str]]:
    """``(E, mode, expected record)`` of an assert's condition, or ``None`` when its form is not decided here."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return (test.operand, "truth", "F") if _plain(test.operand) else None
    if not isinstance(test, ast.Compare):
        return (test, "truth", "T") if _plain(test) else None
    if len(test.ops) != 1:
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.Eq):
        for expr, other in ((left, right), (right, left)):
            value = _literal(other)
            if value is not _NOT_LITERAL and _plain(expr):
                return expr, "eq", encode(value, "eq")
    if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and any(right.value is c for c in (True, False, None)):
        return (left, "is", encode(right.value, "is")) if _plain(left) else None
    return None


def decide(code: str) -> Optional[tuple[str, str]]:
    """``(the test as the worker runs it, the answer that passes)``; ``None`` when the trainer cannot decide it.

    Decided: at least one ``assert``, every one a top-level statement of a form
    ``_split`` knows. The answer is ``"="`` and the ``digest`` of the expected records.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    top = [i for i, s in enumerate(tree.body) if isinstance(s, ast.Assert)]
    if not top or sum(isinstance(n, ast.Assert) for n in ast.walk(tree)) != len(top):
        return None
    expected = []
    for i in top:
        stmt = tree.body[i]
        split = _split(stmt.test)  # type: ignore[attr-defined]
        if split is None:
            return None
        expr, mode, want = split
        call = ast.Call(ast.Name(CHECK, ast.Load()), [expr, ast.Constant(mode)], [])
        tree.body[i] = ast.copy_location(ast.Expr(call), stmt)
        expected.append(want)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", "=" + digest(expected)
