"""Shared fixtures: one torch thread per test process (2-core machines), tiny policies."""

import os

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _isolated_run_dir(tmp_path, monkeypatch):
    """Runs write their logs and checkpoints under the test's tmp dir."""
    monkeypatch.chdir(tmp_path)
    yield
