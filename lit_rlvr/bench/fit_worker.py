"""Run many ``lit-rlvr fit`` commands in a few long-lived processes.

A benchmark runs dozens of short fits. Starting each as ``python -m lit_rlvr.run.cli fit`` pays the
import of Lightning, transformers and lit-rlvr (about 4 s on a 2-core CPU) every time;
``FitPool`` imports them once per worker process and then runs each fit in it, in its own
folder, with its output in ``<folder>/fit.log``. A fit is the same ``LitRLVRCLI`` a command line
gets (same arguments, same seeding by ``seed_everything``), so its results do not depend on
which worker ran it or what ran there before.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import traceback
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Sequence


def run_fit(run_dir: str | Path, argv: Sequence[str], log_name: str = "fit.log", append: bool = False) -> tuple[int, float]:
    """``lit-rlvr <argv>`` with ``run_dir`` as the working directory; stdout and stderr go to ``run_dir/log_name``
    (after what it holds with ``append``: a resumed fit's log follows the killed one's).

    Returns (exit status, seconds). The status is 0 on success, the ``SystemExit`` code of a
    config error, and 1 for any other exception (its traceback is in the log). The caller's
    working directory, file descriptors 1 and 2, ``sys.stdout``/``sys.stderr`` and ``sys.argv``
    are restored afterwards.
    """
    from lit_rlvr.run.cli import main

    run_dir = Path(run_dir)
    cwd = os.getcwd()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    t0 = time.perf_counter()
    rc = 0
    streams, sys_argv = (sys.stdout, sys.stderr), sys.argv
    with open(run_dir / log_name, "a" if append else "w", buffering=1) as log:
        os.dup2(log.fileno(), 1)  # the fds: C extensions and handlers holding the original streams
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log  # and Python's streams, wherever they pointed
        sys.argv = ["lit-rlvr", *argv]  # as if typed (LightningCLI warns when given both args and sys.argv)
        try:
            os.chdir(run_dir)
            main()  # parses sys.argv
        except SystemExit as exc:  # jsonargparse's config errors, our start-up checks
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)  # a message: Python would have printed it
        except Exception:
            traceback.print_exc()
            rc = 1
        finally:
            log.flush()
            sys.stdout, sys.stderr = streams
            sys.argv = sys_argv
            os.chdir(cwd)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
    return rc, time.perf_counter() - t0


def run_fit_measured(run_dir: str | Path, argv: Sequence[str], log_name: str = "fit.log",
                     append: bool = False) -> tuple[int, float, dict]:
    """``run_fit``, and what the fit cost: (exit status, wall seconds, usage).

    ``usage``: ``cpu_seconds``, user + system of this process and every process it started during the fit
    (reward workers included; ``lit_rlvr.critical_batch.cpu_clock.tree_cpu_seconds``, evaluations included), and the
    machine's load averages at the start and the end (``load_start``, ``load_end``: 1, 5, 15 minutes).
    """
    from lit_rlvr.critical_batch.cpu_clock import load_average, tree_cpu_seconds

    load_start, cpu0 = load_average(), tree_cpu_seconds()
    rc, seconds = run_fit(run_dir, argv, log_name, append)
    usage = {"cpu_seconds": round(tree_cpu_seconds() - cpu0, 2), "load_start": load_start, "load_end": load_average()}
    return rc, seconds, usage


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this worker when the process that started it dies.

    Without it, killing a benchmark (``kill <pid>``, not Ctrl-C on the whole process group) leaves
    its workers running their fits: Lightning catches SIGTERM to checkpoint, and the orphans go on
    writing into run folders that a restarted benchmark has already cleared and reused.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request was in place
        os._exit(1)


def _init_worker(threads: int, parent: int) -> None:
    """Worker initializer: die with the parent, set the thread count before torch loads, pay the imports once."""
    _die_with_parent(parent)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    import lit_rlvr.run.cli  # noqa: F401


class FitPool:
    """``jobs`` worker processes (spawned, so each starts clean) that run ``run_fit`` calls.

    ``threads``: torch threads per worker (one each lets ``jobs`` workers share ``jobs`` cores).
    """

    def __init__(self, jobs: int, threads: int = 1):
        self._pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker, initargs=(threads, os.getpid()))

    def submit(self, run_dir: str | Path, argv: Sequence[str], append: bool = False) -> Future:
        """A future of ``run_fit(run_dir, argv, append=append)``'s (exit status, seconds)."""
        return self._pool.submit(run_fit, str(run_dir), list(argv), "fit.log", append)

    def submit_measured(self, run_dir: str | Path, argv: Sequence[str], append: bool = False) -> Future:
        """A future of ``run_fit_measured(run_dir, argv, append=append)``'s (exit status, seconds, usage)."""
        return self._pool.submit(run_fit_measured, str(run_dir), list(argv), "fit.log", append)

    def __enter__(self) -> "FitPool":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=exc[0] is not None)
