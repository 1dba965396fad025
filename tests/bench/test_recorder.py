"""SelectionRecorder in a real `lit-rlvr fit` run, and the report on that run's logs."""

import csv
import glob
from pathlib import Path

from lit_rlvr.bench.report import make_report
from lit_rlvr.run.cli import main

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


def test_recorder_in_a_real_fit_and_report_on_its_logs(tmp_path):
    main([
        "fit", "--config", TINY, "--trainer.max_steps=2", "--data.pool_multiple=2",
        "--trainer.callbacks+=lit_rlvr.callbacks.GRESO",
        "--trainer.callbacks+=lit_rlvr.bench.recorder.SelectionRecorder",  # last: after the selectors
        "--model.evaluation.before_training=true",
    ])  # runs under the test's tmp dir (conftest chdir)
    (metrics,) = glob.glob("runs/tiny/csv/version_*/metrics.csv")
    selection = Path(metrics).parent / "selection.csv"
    with open(metrics) as f:
        train = [r for r in csv.DictReader(f) if r.get("rollouts/generated")]
    with open(selection) as f:
        records = list(csv.DictReader(f))
    for step, row in enumerate(train):
        mine = [r for r in records if int(r["step"]) == step]
        assert len(mine) == 8  # pool of 2 × B = 8 candidates, each recorded once
        rolled = [r for r in mine if r["status"] in ("easy", "hard", "effective")]
        assert len(rolled) == int(float(row["groups/generated"]))
        assert {r["status"] for r in mine} <= {"skipped", "unused", "easy", "hard", "effective"}
    summary = make_report(["runs/tiny"], tmp_path / "report", target=0.0)
    assert "tiny" in summary["strategies"]
    assert (tmp_path / "report" / "selection_heatmaps.png").exists()
    assert (tmp_path / "report" / "accuracy_vs_rollouts.png").exists()
