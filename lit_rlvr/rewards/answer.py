"""Pull the final answer out of a completion (pure string functions, no model code).

Reward functions compare an *answer* with the reference, not the whole
completion, which holds the reasoning too. ``extract_answer`` is the one place
that decides what the answer is, so every reward agrees on it.
"""

from __future__ import annotations

import re
from typing import Optional

ANSWER_MODES = ("tag", "last_line", "full", "last_number")
"""Modes of ``extract_answer``."""

# Content may not contain another answer tag ("tempered" token): the last block of
# "<answer>a<answer>b</answer>" is "b", and degenerate completions such as 6,000
# repeated "<answer>" stay linear-time (a lazy ".*?" makes them quadratic: seconds).
_TAG_RE = re.compile(r"<answer>((?:(?!</?answer>).)*)</answer>", re.DOTALL | re.IGNORECASE)

# A number not glued to a word or to a preceding digit/dot: optional sign (only when
# not preceded by an alphanumeric, so "10-5" yields "5", not "-5"), integer part with
# optional thousands separators, optional decimals, optional "/denominator".
_NUMBER_RE = re.compile(
    r"""
    (?<![\w.])                                  # not inside a word or after a dot
    (?:(?<![\w)\]}])-)?                         # sign, unless it reads as a minus
    (?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?        # 1,234 / 1234 / 3.14
    (?:/\d+(?:\.\d+)?)?                         # optional /denominator
    (?![\w])                                    # not followed by letters (e.g. "3rd", "x2")
    |
    (?<![\w.])(?:(?<![\w)\]}])-)?\.\d+(?![\w])  # .5
    """,
    re.VERBOSE,
)


def extract_answer(text: Optional[str], mode: str = "tag") -> Optional[str]:
    """The answer part of ``text``, stripped; ``None`` when there is none.

    An empty ``<answer></answer>`` block gives ``""`` (the model answered, with nothing).

    Modes:

    * ``"tag"``: the content of the last ``<answer>...</answer>`` block (tags
      matched case-insensitively; an unclosed tag does not count; a block's
      content holds no other answer tag).
    * ``"last_line"``: the last non-blank line.
    * ``"full"``: the whole text.
    * ``"last_number"``: the last integer, decimal or fraction (``-3``,
      ``1,234`` -> ``1234``, ``3.5``, ``.5``, ``7/8``). A ``-`` right after a
      digit, letter or closing bracket is read as subtraction, not a sign, so
      ``10-5`` gives ``5``. Numbers glued to letters (``3rd``, ``x2``) are skipped.

    Examples:
        >>> extract_answer("<think>2+2</think><answer> 4 </answer>", "tag")
        '4'
        >>> extract_answer("so the total is 1,250.5 dollars.", "last_number")
        '1250.5'
    """
    if mode not in ANSWER_MODES:
        raise ValueError(f"unknown answer extraction mode {mode!r}; choose one of {', '.join(ANSWER_MODES)}")
    if not text:
        return None
    if mode == "tag":
        matches = _TAG_RE.findall(text)
        if not matches:
            return None
        return matches[-1].strip()
    if mode == "last_line":
        for line in reversed(text.splitlines()):
            if line.strip():
                return line.strip()
        return None
    if mode == "full":
        stripped = text.strip()
        return stripped or None
    # last_number
    matches = _NUMBER_RE.findall(text)
    if not matches:
        return None
    return matches[-1].replace(",", "")
