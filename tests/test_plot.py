"""lit_rlvr.plot: a run resumed into later versions is read and plotted whole, in step order."""

import csv
import runpy
import sys
from pathlib import Path

import pytest

from lit_rlvr.plot import heldout, load_run, metrics_files, plot_run

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True)
    keys = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _train(step: int, acc: float) -> dict:
    return {"step": step, "rollouts/generated": 16, "reward/mean": acc, "reward/accuracy": acc}


@pytest.fixture
def resumed_run(tmp_path) -> Path:
    """version_4: an evaluation before training, steps 0-5; version_20 resumed at step 4, ran to step 9."""
    csv_dir = tmp_path / "run" / "csv"
    _write(csv_dir / "version_4" / "metrics.csv", [{"step": 0, "val/pass@1": 0.1}] + [_train(s, 0.1) for s in range(6)])
    _write(csv_dir / "version_20" / "metrics.csv", [_train(s, 0.9) for s in range(4, 10)] + [{"step": 9, "val/pass@1": 0.7}])
    return tmp_path / "run"


def test_versions_merge_in_number_order_and_later_rows_replace_earlier(resumed_run):
    assert [p.parent.name for p in metrics_files(resumed_run)] == ["version_4", "version_20"]
    rows = load_run(resumed_run)
    train = [r for r in rows if "reward/mean" in r]
    assert [int(r["step"]) for r in train] == list(range(10))
    assert [r["reward/mean"] for r in train] == [0.1] * 4 + [0.9] * 6  # steps 4, 5: version_20's
    assert heldout(rows) == [(0, {"val/pass@1": 0.1}, True), (10, {"val/pass@1": 0.7}, False)]
    # up to a version: what a run that is still at version_4 shows
    assert [int(r["step"]) for r in load_run(resumed_run, upto=metrics_files(resumed_run)[0]) if "reward/mean" in r] == list(range(6))


def test_plot_run_script_plots_the_whole_run(resumed_run, monkeypatch, capsys):
    out = resumed_run / "reward.png"
    monkeypatch.setattr(sys, "argv", ["plot_run.py", str(resumed_run), "--out", str(out)])
    runpy.run_path(str(ROOT / "scripts" / "plot_run.py"), run_name="__main__")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out) in capsys.readouterr().out


def test_several_runs_under_one_folder_are_named_not_mixed(resumed_run, tmp_path):
    _write(tmp_path / "other" / "csv" / "version_0" / "metrics.csv", [_train(0, 0.5)])
    with pytest.raises(ValueError, match="several runs"):
        metrics_files(tmp_path)
    plot_run(load_run(resumed_run), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0
