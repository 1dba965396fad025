"""run_fit and FitPool: fits in a long-lived process, each in its folder, with its own log."""

import csv
import os
import sys
from pathlib import Path

from lit_rlvr.bench.fit_worker import FitPool, run_fit

ROOT = Path(__file__).resolve().parents[2]
TINY = ["fit", "--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.max_steps", "2",
        "--trainer.val_check_interval", "2", "--trainer.logger.init_args.save_dir", "runs/tiny"]


def _metrics(run_dir: Path) -> list[dict]:
    (path,) = run_dir.glob("runs/tiny/csv/version_*/metrics.csv")
    rows = list(csv.DictReader(path.open()))
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_config_error_is_an_exit_status_in_the_log_and_the_caller_is_restored(tmp_path, capfd):
    cwd = os.getcwd()
    rc, seconds = run_fit(tmp_path, ["fit", "--config", str(ROOT / "configs" / "tiny.yaml"), "--model.no_such_flag", "1"])
    assert rc != 0 and seconds > 0
    assert "no_such_flag" in (tmp_path / "fit.log").read_text()
    assert os.getcwd() == cwd
    print("after the fit")  # stdout is ours again, not the log's
    sys.stdout.flush()
    assert "after the fit" in capfd.readouterr().out
    assert "after the fit" not in (tmp_path / "fit.log").read_text()


def test_the_same_fit_twice_in_one_process_gives_the_same_metrics(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for rd in (first, second):
        rd.mkdir()
        rc, _ = run_fit(rd, TINY)
        assert rc == 0, (rd / "fit.log").read_text()[-2000:]
    rows = _metrics(first)
    assert any(r.get("cumulative/rollouts_generated") for r in rows)
    assert rows == _metrics(second)  # nothing carries over from the earlier fit in the same process


def test_pool_runs_fits_in_workers(tmp_path):
    with FitPool(jobs=1) as pool:
        futures = {}
        for name, argv in [("ok", TINY), ("bad", TINY + ["--trainer.max_steps", "oops"])]:
            (tmp_path / name).mkdir()
            futures[name] = pool.submit(tmp_path / name, argv)
        results = {name: f.result() for name, f in futures.items()}
    assert results["ok"][0] == 0, (tmp_path / "ok" / "fit.log").read_text()[-2000:]
    assert _metrics(tmp_path / "ok")
    assert results["bad"][0] != 0 and "max_steps" in (tmp_path / "bad" / "fit.log").read_text()
