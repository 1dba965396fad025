"""lit_rlvr.critical_batch.cpu_clock: CPU seconds of a fit's process tree, live workers and waited-for ones, counted once."""

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lit_rlvr.critical_batch.cpu_clock import descendants, load_average, tree_cpu_seconds
from lit_rlvr.bench.fit_worker import run_fit, run_fit_measured

ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
# a child that starts a grandchild burning ~0.6 s of CPU, waits for it, then burns ~0.3 s itself and sleeps
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"
TREE = ("import subprocess, sys, time\n"
        "subprocess.run([sys.executable, '-c', {grand!r}])\n" + BURN.format(s=0.3) + "print('done', flush=True)\ntime.sleep(30)\n")


@linux
def test_a_live_worker_and_the_worker_it_waited_for_are_counted_once():
    before = tree_cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", TREE.format(grand=BURN.format(s=0.6))], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        assert child.pid in descendants()
        live = tree_cpu_seconds() - before  # the child is alive: its own 0.3 s and its grandchild's 0.6 s via /proc
        assert 0.85 <= live <= 0.85 + 1.0  # + two interpreters' start-up
    finally:
        child.kill()
        child.wait()
    reaped = tree_cpu_seconds() - before  # now in this process's children time, not in /proc
    assert child.pid not in descendants()
    assert abs(reaped - live) < 0.1  # moved, not lost or counted twice


def test_off_proc_the_count_is_this_process_and_its_waited_for_children(monkeypatch):
    import lit_rlvr.critical_batch.cpu_clock as cc

    monkeypatch.setattr(cc, "descendants", lambda root=None: {})
    def own():
        t = os.times()
        return time.process_time() + t.children_user + t.children_system
    lo = own()
    got = cc.tree_cpu_seconds()
    assert lo - 1e-6 <= got <= own() + 1e-6
    assert load_average() is None or len(load_average()) == 3


def _tiny(tmp_path: Path, name: str, clock: bool) -> Path:
    rd = tmp_path / name
    rd.mkdir()
    layer = rd / "clock.yaml"
    callbacks = [{"class_path": "lit_rlvr.critical_batch.cpu_clock.CpuClock"}] if clock else []
    layer.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    argv = ["fit", "--config", str(ROOT / "configs" / "tiny.yaml"), "--config", str(layer), "--trainer.max_steps", "3",
            "--trainer.val_check_interval", "3", "--trainer.logger.init_args.save_dir", "runs/tiny"]
    rc, wall, usage = run_fit_measured(rd, argv)
    assert rc == 0, (rd / "fit.log").read_text()[-2000:]
    assert usage["cpu_seconds"] > 0 and wall > 0
    (path,) = rd.glob("runs/tiny/csv/version_*/metrics.csv")
    return path


@linux
def test_the_clock_logs_each_steps_cpu_seconds_and_changes_no_number(tmp_path):
    timed, plain = _tiny(tmp_path, "timed", True), _tiny(tmp_path, "plain", False)
    rows = list(csv.DictReader(timed.open()))
    cpu = [float(r["time/cpu_s"]) for r in rows if r.get("time/cpu_s")]
    assert len(cpu) == 3 and all(c > 0 for c in cpu)
    wall = [sum(float(r[k]) for k in ("time/rollout_s", "time/reward_s", "time/update_s")) for r in rows if r.get("time/cpu_s")]
    # one thread, one fit: a step's CPU seconds are of the order of its wall seconds (not of the whole fit's)
    assert sum(cpu) < 3 * sum(wall) + 1.0

    def numbers(path):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(path.open())]
    assert numbers(timed) == numbers(plain)
