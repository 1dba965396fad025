"""The unit suite's duration guard (tests/duration_guard.py) fails a test past its CPU limit unless it is marked."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import time
import pytest

def _burn(seconds):
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass

def test_over_the_limit():
    _burn(0.6)

@pytest.mark.long_unit(reason="checks the exemption")
def test_marked_long():
    _burn(0.6)

@pytest.mark.integration
def test_end_to_end():
    _burn(0.6)

def test_quick():
    pass
'''


def test_a_unit_test_past_the_cpu_limit_fails_unless_marked(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "LIT_RLVR_TEST_CPU_LIMIT_S": "0.3", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path / "test_probe.py"), "-p", "tests.duration_guard", "-q", "-rA",
         "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    text = out.stdout + out.stderr
    assert "FAILED" in text and "test_over_the_limit" in text and "of CPU" in text, text
    assert "PASSED test_probe.py::test_marked_long" in text and "PASSED test_probe.py::test_end_to_end" in text, text
    assert "PASSED test_probe.py::test_quick" in text and "1 failed, 3 passed" in text, text
