"""Shared test set-up: torch threads, a home of its own for the session, and each test in its own temporary directory.

The session's ``HOME``, XDG folders and library caches (Hugging Face datasets and hub, torch,
matplotlib, lit-rlvr's own) point into one temporary folder, set here before any test imports
those libraries, so the suite writes nothing into the user's home. lit-rlvr's dequantized SmolLM2,
when the user already has it, is linked in read-only use rather than rebuilt. At the end of the
session the user's ``~/.cache``, ``~/.config``, ``~/.local`` and the home's top level are compared
with their state at the start; a change fails the session, naming what changed
(``LIT_RLVR_TESTS_HOME_CHECK=0`` turns the check off, e.g. where other jobs share the home).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

pytest_plugins = ["tests.duration_guard"]  # a unit test past its CPU limit fails (tests/duration_guard.py)

_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
"""Test processes sharing the CPUs (pytest-xdist's ``-n``, on by default in pyproject.toml)."""
if "OMP_NUM_THREADS" not in os.environ:  # respect an explicit setting (shared machines: 1 avoids spin-wait stalls)
    # the CPUs split between the test processes: two processes of two threads each stall on 2 cores
    torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _XDIST_WORKERS)))

USER_HOME = Path(os.path.expanduser("~")).resolve()
SESSION_HOME = Path(tempfile.mkdtemp(prefix="lit-rlvr-tests-home-"))
WATCHED = (".cache", ".config", ".local")
"""Folders of the user's home compared before and after the session (with the home's top level)."""


def _isolate_home() -> None:
    user_cache = Path(os.environ.get("LIT_RLVR_CACHE") or USER_HOME / ".cache" / "lit_rlvr")
    env = {
        "HOME": SESSION_HOME,
        "XDG_CACHE_HOME": SESSION_HOME / ".cache",
        "XDG_CONFIG_HOME": SESSION_HOME / ".config",
        "XDG_DATA_HOME": SESSION_HOME / ".local" / "share",
        "HF_HOME": SESSION_HOME / ".cache" / "huggingface",
        "HF_DATASETS_CACHE": SESSION_HOME / ".cache" / "huggingface" / "datasets",
        "HF_HUB_CACHE": SESSION_HOME / ".cache" / "huggingface" / "hub",
        "TORCH_HOME": SESSION_HOME / ".cache" / "torch",
        "MPLCONFIGDIR": SESSION_HOME / ".config" / "matplotlib",
        "LIT_RLVR_CACHE": SESSION_HOME / ".cache" / "lit_rlvr",
    }
    for name, path in env.items():
        path.mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(path)
    from lit_rlvr.policy import SMOLLM2_NAME, _cache_complete

    if _cache_complete(user_cache / SMOLLM2_NAME):  # read, never written: a complete cache is only loaded
        (env["LIT_RLVR_CACHE"] / SMOLLM2_NAME).symlink_to(user_cache / SMOLLM2_NAME, target_is_directory=True)


def home_state(home: Path = USER_HOME) -> dict[str, tuple[int, int]]:
    """``{path: (size, mtime_ns)}`` of the home's top level and everything under ``WATCHED`` (links not followed)."""
    state: dict[str, tuple[int, int]] = {}

    def note(path: str) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            return
        state[path] = (st.st_size, st.st_mtime_ns)

    with os.scandir(home) as entries:
        for entry in entries:
            note(entry.path)
    for name in WATCHED:
        for root, dirs, files in os.walk(home / name):
            for n in dirs + files:
                note(os.path.join(root, n))
    return state


def home_changes(before: dict, after: dict) -> list[str]:
    """What differs between two ``home_state`` snapshots: added, removed and changed paths."""
    return sorted(
        [f"added {p}" for p in after.keys() - before.keys()]
        + [f"removed {p}" for p in before.keys() - after.keys()]
        + [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    )


_isolate_home()
_HOME_CHECK = os.environ.get("LIT_RLVR_TESTS_HOME_CHECK", "1") != "0"
_HOME_BEFORE = home_state() if _HOME_CHECK else {}


def pytest_sessionfinish(session, exitstatus):
    if _HOME_CHECK:
        changes = home_changes(_HOME_BEFORE, home_state())
        if changes:
            session.config.get_terminal_writer().line(
                f"the tests changed the user's home ({USER_HOME}), which they must not: " + "; ".join(changes[:20]),
                red=True,
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(SESSION_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _isolated_run_dir(tmp_path, monkeypatch):
    """Runs write their logs and checkpoints under the test's tmp dir."""
    monkeypatch.chdir(tmp_path)
    yield
