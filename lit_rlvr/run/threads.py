"""The ``lit-rlvr`` process's thread policy, applied before torch computes anything.

- The user decides first: ``LIT_RLVR_THREADS=N`` (lit-rlvr's own setting), else ``OMP_NUM_THREADS=N``,
  sets torch's intra-op threads to N.
- Otherwise a machine with at most ``SMALL_MACHINE`` CPUs available to the process runs one
  intra-op thread. On a shared 2-core machine two OpenMP threads stall each other: each parallel
  region waits for the thread the scheduler has parked (a 135M-parameter forward of 8 rows took
  over 90 s beside other work, 2026-12-03), and threaded kernels may split their work differently
  from run to run, so the same command under load need not give the same numbers. One thread is
  also how the project's CPU numbers were measured. Larger machines keep torch's default.
- MKL's dynamic threading is turned off (``MKL_DYNAMIC=FALSE``, unless set): MKL then never picks
  fewer threads than asked on its own.

The chosen count is exported as ``OMP_NUM_THREADS`` so processes Lightning launches (DDP ranks)
follow it; reward workers set their own (one thread each, ``lit_rlvr.rewards.workers.settings``).
"""

from __future__ import annotations

import logging
import os
from typing import MutableMapping, Optional, Sequence

THREADS_ENV = "LIT_RLVR_THREADS"
SMALL_MACHINE = 4
"""At most this many available CPUs: one intra-op thread unless the user chose."""


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _positive(value: Optional[str]) -> Optional[int]:
    try:
        n = int(value) if value is not None else 0
    except ValueError:
        return None
    return n if n > 0 else None


def choose_threads(environ: MutableMapping[str, str], cpus: int) -> tuple[Optional[int], str]:
    """``(threads, why)``: the intra-op thread count to set (None: keep torch's default) and the reason."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        if name in environ:
            n = _positive(environ[name])
            if n is None:
                raise SystemExit(f"{name}={environ[name]!r}: set it to a positive number of threads (e.g. {name}=1)")
            return n, f"set by {name}={n}"
    if cpus <= SMALL_MACHINE:
        return 1, f"{cpus} CPUs here: one thread on machines with {SMALL_MACHINE} or fewer; {THREADS_ENV}=N for another count"
    return None, f"torch's default for {cpus} CPUs; {THREADS_ENV}=N for another count"


def apply_thread_policy(
    argv: Sequence[str] = (), environ: Optional[MutableMapping[str, str]] = None, cpus: Optional[int] = None
) -> str:
    """Set torch's intra-op threads and MKL's dynamic threading per this module's policy; returns a one-line
    account, which a ``fit`` command line (``argv``; not its --help or --print_config) also logs."""
    import torch

    environ = os.environ if environ is None else environ
    threads, why = choose_threads(environ, available_cpus() if cpus is None else cpus)
    environ.setdefault("MKL_DYNAMIC", "FALSE")
    if threads is not None:
        torch.set_num_threads(threads)
        environ["OMP_NUM_THREADS"] = str(threads)
    n = torch.get_num_threads()
    account = f"{n} torch thread{'' if n == 1 else 's'} ({why})"
    if list(argv[:1]) == ["fit"] and not any(a in ("-h", "--help") or a.startswith("--print_config") for a in map(str, argv)):
        logging.getLogger("lit_rlvr").info("lit-rlvr: %s", account)
    return account
