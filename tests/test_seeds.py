"""The core's one seed recipe (``lit_rlvr.seeds.derive_seed``): the values runs have always used, and no
other seed arithmetic in the core."""

import re
from pathlib import Path

import pytest

from lit_rlvr.seeds import derive_seed

PACKAGE = Path(__file__).resolve().parents[1] / "lit_rlvr"
CORE = [*sorted((PACKAGE / "rollout").glob("*.py")), PACKAGE / "policy_module.py", PACKAGE / "module.py", PACKAGE / "selection.py"]


@pytest.mark.parametrize("seed, step, round_, rank", [(0, 0, 0, 0), (3, 17, 2, 1), (123456789, 99999, 11, 7), (2**40, 5, 0, 3)])
def test_the_recipes_give_the_values_runs_always_used(seed, step, round_, rank):
    assert derive_seed("round", seed=seed, step=step, round=round_, rank=rank) == (
        seed * 1_000_003 + step * 10_007 + round_ * 101 + rank * 7919) % (2**31 - 1)
    assert derive_seed("continuation", seed=seed) == (seed * 31 + 17) % (2**31 - 1)
    assert derive_seed("evaluation", seed=seed, batch=step) == seed + step
    assert derive_seed("draw", step=step, rank=rank, drawn=round_) == (step * 4096 + rank) * 1_000_003 + round_
    assert derive_seed("engine", seed=seed, rank=rank) == seed + rank
    assert derive_seed("sample", seed=seed, sample=step) == seed + step
    with pytest.raises(TypeError, match="takes the parts"):
        derive_seed("round", seed=seed, step=step)  # a part left out fails, it is never taken as 0


def test_the_core_derives_no_seed_of_its_own():
    """Seed arithmetic (a multiplier of a seed, or the 31-bit modulus) appears in the core only through derive_seed."""
    pattern = re.compile(r"seed\s*[*+%]|[*+]\s*seed\b|2\s*\*\*\s*31|1_000_003|10_007")
    found = [f"{p.relative_to(PACKAGE.parent)}:{i}: {line.strip()}" for p in CORE
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line.split("#")[0])]
    assert not found, "derive a seed with lit_rlvr.seeds.derive_seed:\n" + "\n".join(found)
