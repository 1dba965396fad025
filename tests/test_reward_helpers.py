"""The tests' reward functions stay cheap to import: a reward worker imports their module in a fresh
interpreter at every start, and torch or Lightning there cost each start tens of seconds on 2 cores."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "transformers", "numpy", "lit_rlvr")
"""What a reward module of the tests may not load (the reward worker itself needs none of them)."""


def _reward_modules() -> dict[str, str]:
    """Every module a test names as a reward (``fn=tests.x:f``, ``fn: 'tests.x:f'``, ``"tests.x:{fn}"``),
    with one file that names it."""
    named = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        text = path.read_text()
        for module in re.findall(r"fn[=:]\s*[\"']?(tests(?:\.\w+)+)[:.]\w+", text) + re.findall(r"[\"'](tests(?:\.\w+)+):\{", text):
            named.setdefault(module, path.relative_to(ROOT).as_posix())
    for path in (ROOT / "configs").rglob("*.yaml"):
        for module in re.findall(r"fn:\s*[\"']?(tests(?:\.\w+)+)[:.]\w+", path.read_text()):
            named.setdefault(module, path.relative_to(ROOT).as_posix())
    return named


def test_the_scan_finds_the_reward_modules():
    assert {"tests.helpers", "tests.sleepy_reward", "tests.rewards.helpers"} <= set(_reward_modules())


def test_every_reward_module_imports_neither_torch_nor_lightning(tmp_path):
    heavy = {}
    for module, where in _reward_modules().items():
        if not (ROOT / (module.replace(".", "/") + ".py")).is_file():
            continue  # a deliberately missing module (the error-message tests)
        code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
        # TMPDIR: tests.rewards.hostile_module marks its import in the temporary directory
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)})
        assert done.returncode == 0, f"{module} (named in {where}) does not import: {done.stderr[-2000:]}"
        if done.stdout.strip():
            heavy[f"{module} (named in {where})"] = done.stdout.split()
    assert not heavy, f"reward modules that load heavy packages (keep them to the standard library): {heavy}"
