"""Shared test set-up: torch threads, and each test runs in its own temporary directory."""

import os

import pytest
import torch

pytest_plugins = ["tests.duration_guard"]  # a unit test past its CPU limit fails (tests/duration_guard.py)

if "OMP_NUM_THREADS" not in os.environ:  # respect an explicit setting (shared machines: 1 avoids spin-wait stalls)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _isolated_run_dir(tmp_path, monkeypatch):
    """Runs write their logs and checkpoints under the test's tmp dir."""
    monkeypatch.chdir(tmp_path)
    yield
