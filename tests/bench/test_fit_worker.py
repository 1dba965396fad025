"""run_fit and FitPool: fits in a long-lived process, each in its folder, with its own log."""

import csv
import os
import sys
from pathlib import Path

import pytest

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


@pytest.mark.integration
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_workers_die_with_the_benchmark_process(tmp_path):
    # a benchmark killed with `kill <pid>` must not leave its workers running fits into reused run folders
    import signal
    import subprocess
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys, time\n"
        "from lit_rlvr.bench.fit_worker import FitPool\n"
        "if __name__ == '__main__':  # spawned workers re-import this file\n"
        "    pool = FitPool(1)\n"
        "    print(pool._pool.submit(os.getpid).result(), flush=True)\n"
        "    pool._pool.submit(time.sleep, 120)\n"
        "    time.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        worker = int(parent.stdout.readline())
        os.kill(worker, 0)  # alive
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:  # gone, or a zombie waiting for init to reap it
                if Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.2)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail("the worker outlived its parent")
    finally:
        parent.kill()
