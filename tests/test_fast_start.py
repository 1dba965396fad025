"""The console script starts fast (lit_rlvr.run.launch): the help of a command seen before comes from its cache and
imports none of torch, Lightning, transformers or jsonargparse; the user tools' --help imports none either; a changed
--config file renders the help again."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lit_rlvr.run.launch import help_key, main

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
HEAVY = ("torch", "lightning", "transformers", "jsonargparse", "matplotlib", "pandas", "numpy")
PROBE = ("import json, sys\nfrom lit_rlvr.run.launch import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "json.dump(sorted({m.split('.')[0] for m in sys.modules} & set(%r)), sys.stderr)" % (HEAVY,))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIT_RLVR_HELP_CACHE", str(tmp_path / "help"))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(ROOT)
    return tmp_path / "help"


def _probe(*args: str) -> tuple[str, list[str]]:
    """Run ``lit-rlvr ARGS`` in a fresh interpreter: (its stdout, the heavy packages it imported)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def test_a_help_seen_before_comes_from_the_cache_and_imports_nothing_heavy(cache, capsys):
    # before: lit-rlvr --help took 12.5 s and fit --help 8.4 s at load 2.5, every time (torch, Lightning, ...)
    for argv in (["--help"], ["fit", "--help"]):
        main(argv)  # rendered by LightningCLI in this process, and kept
        rendered = capsys.readouterr().out
        assert "usage: lit-rlvr" in rendered and len(list(cache.glob("*.txt"))) == len(argv)
        out, heavy = _probe(*argv)
        assert out == rendered and heavy == []
    assert "user tools:" in rendered or "--trainer.max_steps" in rendered


def test_the_user_tools_help_imports_nothing_heavy(cache):
    for tool in ("report", "plot"):
        out, heavy = _probe(tool, "--help")
        assert out.startswith(f"usage: lit-rlvr {tool}") and heavy == []


def test_the_key_follows_the_config_files_and_the_arguments(tmp_path, cache):
    config = tmp_path / "c.yaml"
    config.write_text("trainer: {max_steps: 1}\n")
    argv = ["fit", "--config", str(config), "--help"]
    first = help_key(argv)
    assert help_key(argv) == first and help_key(["fit", "--help"]) != first
    config.write_text("trainer: {max_steps: 22}\n")  # another size: another key
    assert help_key(argv) != first


def test_a_report_on_a_run_imports_no_torch(tmp_path, cache):
    # before: 9-11 s at load 4-5, most of it torch and Lightning (groups.csv's reader lived beside the recorder)
    from tests.test_advice import _run_folder

    _run_folder(tmp_path / "csv" / "version_0", (2.0, 3.0, 2.5, 2.0, 3.5, 2.5))
    out, heavy = _probe("report", str(tmp_path))
    assert "  advice                try --data.batch_size=1" in out
    assert not {"torch", "lightning", "transformers", "jsonargparse"} & set(heavy), heavy
