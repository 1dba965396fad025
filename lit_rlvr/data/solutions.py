"""Reference solutions for reasoning-gym entries (OC-GRPO's guided prompts need one).

An entry's solution is, in order of preference:

- a worked solution the entry carries (``metadata["answer_cot"]``: gsm_symbolic);
- for the arithmetic tasks (basic_arithmetic, chain_sum, whose metadata holds the
  ``expression``): the expression evaluated one operation at a time,
  ``"876 * -29 * 190 = -25404 * 190 = -4826760"``, kept only if its last value equals
  the entry's answer;
- otherwise None: the prompt is never guided.
"""

from __future__ import annotations

import ast
import operator
from fractions import Fraction
from typing import Any, Optional

__all__ = ["reasoning_gym_solution", "worked_arithmetic"]

ARITHMETIC_TASKS = ("basic_arithmetic", "chain_sum")
"""reasoning-gym tasks whose ``expression`` metadata is rendered as a worked solution."""

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def reasoning_gym_solution(answer: str, metadata: dict[str, Any]) -> Optional[str]:
    """The reference solution of one reasoning-gym entry, or None when it has none."""
    cot = metadata.get("answer_cot")
    if isinstance(cot, str) and cot.strip():
        return cot.strip()
    expression = metadata.get("expression")
    if metadata.get("source_dataset") in ARITHMETIC_TASKS and isinstance(expression, str):
        return worked_arithmetic(expression, answer)
    return None


def worked_arithmetic(expression: str, answer: str) -> Optional[str]:
    """``expression`` reduced one operation at a time (leftmost innermost first), joined by " = ".

    None if it does not parse as + − × ÷ over integers, an intermediate value is not an
    integer, or the last value differs from ``answer`` (a wrong guide is worse than none).
    """
    try:
        node = _fold_negation(ast.parse(expression.strip(), mode="eval").body)
        steps = [ast.unparse(node)]
        while not isinstance(node, ast.Constant):
            node = _fold_negation(_reduce_once(node))
            steps.append(ast.unparse(node))
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
        return None
    if steps[-1] != str(answer).strip():
        return None
    return " = ".join(steps)


def _integer(value: Fraction) -> int:
    if value.denominator != 1:
        raise ValueError("non-integer intermediate value")
    return int(value)


def _reduce_once(node: ast.AST) -> ast.AST:
    """Evaluate the leftmost operation whose operands are both numbers."""
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        if isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant):
            value = _OPS[type(node.op)](Fraction(node.left.value), Fraction(node.right.value))
            return ast.Constant(_integer(value))
        if not isinstance(node.left, ast.Constant):
            return ast.BinOp(_reduce_once(node.left), node.op, node.right)
        return ast.BinOp(node.left, node.op, _reduce_once(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return ast.UnaryOp(node.op, _reduce_once(node.operand))
    raise ValueError(f"unsupported expression node {type(node).__name__}")


def _fold_negation(node: ast.AST) -> ast.AST:
    """Turn −(number) into a negative number everywhere (a sign, not a step of its own)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _fold_negation(node.operand)
        if isinstance(inner, ast.Constant) and type(inner.value) is int:
            return ast.Constant(-inner.value if isinstance(node.op, ast.USub) else inner.value)
        if isinstance(node.op, ast.UAdd):
            return inner
        if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.USub):  # −(−x) = x
            return inner.operand
        return ast.UnaryOp(node.op, inner)
    if isinstance(node, ast.BinOp):
        return ast.BinOp(_fold_negation(node.left), node.op, _fold_negation(node.right))
    if isinstance(node, ast.Constant) and type(node.value) is not int:
        raise ValueError("only integer literals")
    return node
