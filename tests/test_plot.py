"""lit_rlvr.report.plot: one run per version, a resumed run read whole in step order, several runs never mixed."""

import csv
from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.report.plot import heldout, load_run, metrics_files, plot_run, read_run


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
    """version_0: an evaluation before training, steps 0-5, then resumed from step 4 into the same file to step 9;
    version_1: another fit in the same folder."""
    csv_dir = tmp_path / "run" / "csv"
    _write(csv_dir / "version_0" / "metrics.csv", [{"step": 0, "val/pass@1": 0.1}] + [_train(s, 0.1) for s in range(6)]
           + [_train(s, 0.9) for s in range(4, 10)] + [{"step": 9, "val/pass@1": 0.7}])
    _write(csv_dir / "version_1" / "metrics.csv", [_train(s, 0.5) for s in range(3)])
    return tmp_path / "run"


def test_a_resumed_run_reads_whole_and_its_resumed_rows_replace_the_repeated_steps(resumed_run):
    rows = read_run(resumed_run / "csv" / "version_0" / "metrics.csv")
    train = [r for r in rows if "reward/mean" in r]
    assert [int(r["step"]) for r in train] == list(range(10))
    assert [r["reward/mean"] for r in train] == [0.1] * 4 + [0.9] * 6  # steps 4, 5: the resumed rows
    assert heldout(rows) == [(0, {"val/pass@1": 0.1}, True), (10, {"val/pass@1": 0.7}, False)]


def test_a_folder_of_several_fits_shows_one_run_unless_asked(resumed_run):
    # before: load_run merged version_1 into version_0 as if one run (its steps 0-2 replaced version_0's)
    assert [p.parent.name for p in metrics_files(resumed_run)] == ["version_0", "version_1"]
    assert [r["reward/mean"] for r in load_run(resumed_run) if "reward/mean" in r] == [0.5] * 3  # the latest
    assert len([r for r in load_run(resumed_run, version=0) if "reward/mean" in r]) == 10


def test_lit_rlvr_plot_writes_into_the_run_folder(resumed_run, monkeypatch, capsys):
    # before: reward.png in the working directory, both versions merged
    monkeypatch.chdir(resumed_run.parent)
    main(["plot", "run", "--version", "0"])
    out = resumed_run / "csv" / "version_0" / "reward.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out.relative_to(resumed_run.parent)) in capsys.readouterr().out
    assert not (resumed_run.parent / "reward.png").exists()
    main(["plot", "run", "--all"])
    assert (resumed_run / "csv" / "reward_all_versions.png").stat().st_size > 0


def test_several_runs_under_one_folder_are_named_not_mixed(resumed_run, tmp_path):
    _write(tmp_path / "other" / "csv" / "version_0" / "metrics.csv", [_train(0, 0.5)])
    with pytest.raises(ValueError, match="several runs"):
        metrics_files(tmp_path)
    plot_run(load_run(resumed_run), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0
