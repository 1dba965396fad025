"""The run's reward sandbox: one memory budget, a clean environment, and what workers may read.

``RewardSandbox`` is ``model.reward_sandbox`` in YAML. The module applies it to
every reward function that runs in workers (``apply_reward_sandbox``): the
budget is shared by all of their workers, so two reward functions with four
workers each cannot take more than ``memory_mb`` together.

Environment: a worker starts from an empty environment plus ``ENV_ALLOWED``
(locale and time zone, hash seed) and the variables named in ``env``; tokens
and keys (``HF_TOKEN``, ``WANDB_API_KEY``, cloud credentials) never reach it.

Reading: ``read_roots`` lists what a confined worker may read (Landlock): the
Python installation (prefixes, so the standard library and site-packages), the
system's shared libraries, the packages the worker imports (lit-rlvr itself, the
reward module's own directory, preloads), the directories on ``sys.path``
(listing only), and ``read_paths``. Everything else (home directories,
``/etc/shadow``, the run folder, the dataset files) is unreadable unless named.
Files registered with ``hide_from_workers`` stay unreadable even inside those
roots: a dataset shipped in a Python package (HumanEval's, with its reference
solutions) would otherwise let a program copy the answers.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence


class _HasWorkerCallers(Protocol):
    """What ``apply_reward_sandbox`` uses of a ``RewardFunction`` (``lit_rlvr.rewards.base``).

    Structural, so that this module (imported by ``lit_rlvr.rewards.workers.pool``, which ``base``
    names) imports neither.
    """

    def worker_callers(self) -> list[Any]: ...

ENV_ALLOWED = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "PYTHONHASHSEED", "PYTHONIOENCODING")
"""Environment variables a worker keeps (when set); anything else must be named in ``RewardSandbox.env``."""

MIN_WORKER_MB = 256
"""Least memory per worker: Python with numpy and sympy imported needs about this much address space."""

SYSTEM_READ_PATHS = (
    "/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/etc/localtime",
    "/usr/share/zoneinfo", "/dev/urandom", "/sys/devices/system/cpu", "/proc/cpuinfo", "/proc/meminfo",
)
"""Shared libraries and the few system files numeric libraries look at; nothing user-specific."""


def physical_memory_mb() -> int:
    """This machine's memory in MB (4096 when it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)
    except (ValueError, OSError, AttributeError):
        return 4096


def default_workers() -> int:
    """Workers per reward function: up to 4, at least 2 so that one hanging call never stalls a batch."""
    return max(2, min(4, os.cpu_count() or 1))


@dataclass
class RewardSandbox:
    """Limits shared by all reward workers of a run (``model.reward_sandbox``)."""

    memory_mb: Optional[int] = None
    """Address space, in MB, of all reward workers together, split evenly between them (default: half
    of the machine's memory). A call that needs more fails with MemoryError, scores 0 and is counted."""
    workers: Optional[int] = None
    """Worker processes per reward function (default: up to 4, at least 2); a reward's own ``workers`` wins."""
    env: list[str] = field(default_factory=list)
    """Names of environment variables passed to workers besides the locale (e.g. [MY_VERIFIER_MODE]).
    Nothing else of the trainer's environment (tokens, keys) reaches them."""
    read_paths: list[str] = field(default_factory=list)
    """Extra files or directories workers may read (e.g. a verifier's data files outside site-packages)."""
    strict: bool = False
    """Refuse to start when part of the confinement is not available on this system (instead of a warning):
    a fit checks the kernel before it builds any reward, and names what is missing."""

    def __post_init__(self) -> None:
        if self.memory_mb is not None and self.memory_mb < MIN_WORKER_MB:
            raise ValueError(
                f"model.reward_sandbox.memory_mb={self.memory_mb}: reward workers need at least {MIN_WORKER_MB} MB "
                "each; raise it (or leave it unset for half the machine's memory)"
            )
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"model.reward_sandbox.workers={self.workers}: set it >= 1 (2 or more, so a hanging call never stalls a batch)")
        for name in self.env:
            if not name or "=" in name:
                raise ValueError(f"model.reward_sandbox.env: {name!r} is not a variable name")

    def check_strict(self) -> None:
        """With ``strict``, ``ValueError`` naming what this system lacks (nothing is started to find out)."""
        from lit_rlvr.rewards.workers.confinement import missing_features, simulated_missing

        missing = missing_features(simulated_missing()) if self.strict else []
        if missing:
            raise ValueError(
                "model.reward_sandbox.strict is true and this system lacks: " + "; ".join(missing)
                + ". Run where the kernel has it, or set model.reward_sandbox.strict: false to run with a warning"
            )

    def budget_mb(self) -> int:
        """The run's budget: ``memory_mb`` or half of the machine's memory."""
        return int(self.memory_mb) if self.memory_mb is not None else physical_memory_mb() // 2


def worker_env(names: Sequence[str], workdir: Optional[str]) -> dict[str, str]:
    """A worker's whole environment: the allowed variables that are set, ``names``, and its own settings."""
    env = {k: os.environ[k] for k in (*ENV_ALLOWED, *names) if k in os.environ}
    env.update(
        PYTHONPATH=os.pathsep.join(os.path.abspath(p or ".") for p in sys.path),  # the trainer's import path
        PYTHONDONTWRITEBYTECODE="1",  # __pycache__ is outside the writable directory
        PYTHONUNBUFFERED="1",  # print() reaches the trainer's log line by line
        OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",  # many workers, one thread each
    )
    if workdir is not None:
        env.update(HOME=workdir, TMPDIR=workdir)
    return env


def module_root(name: str) -> Optional[str]:
    """The file or directory of top-level module ``name``, found without importing (running) it."""
    try:
        spec = importlib.util.find_spec(name.split(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return spec.origin if spec.origin and os.path.isabs(spec.origin) else None


_HIDDEN: set[str] = set()


def hide_from_workers(*paths: str) -> None:
    """Keep ``paths`` unreadable to confined workers even under an allowed root (``read_roots``)."""
    _HIDDEN.update(os.path.realpath(p) for p in paths if p)


def _without(root: str, hidden: Sequence[str]) -> list[str]:
    """``root``, or, when a hidden path lies in it, its entries (recursively) other than the hidden ones.

    Landlock only allows, so a root that holds a hidden file is replaced by what is beside it.
    """
    real = os.path.realpath(root)
    inside = [h for h in hidden if h == real or h.startswith(real.rstrip(os.sep) + os.sep)]
    if not inside:
        return [root]
    if real in inside or not os.path.isdir(root):
        return []
    return [p for entry in sorted(os.listdir(root)) for p in _without(os.path.join(root, entry), inside)]


def read_roots(modules: Sequence[str], extra: Sequence[str], launch_dir: str) -> tuple[list[str], list[str]]:
    """``(readable, listable)`` paths of a confined worker; see the module docstring.

    ``modules`` are the top-level modules the worker imports (looked up here with
    ``find_spec``, which does not run them); a module that is not found here but
    lies in ``launch_dir`` (a reward file beside the config) is allowed from there.
    Hidden files (``hide_from_workers``) are left out of every root.
    """
    readable = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *SYSTEM_READ_PATHS}
    from_launch_dir = False
    for name in ("lit_rlvr", *modules):
        root = module_root(name)
        if root is None:
            top = name.split(".")[0]
            for candidate in (os.path.join(launch_dir, top + ".py"), os.path.join(launch_dir, top)):
                if os.path.exists(candidate):
                    root, from_launch_dir = candidate, True
        if root is not None:
            readable.add(root)
    readable.update(os.path.abspath(p) for p in extra)
    # the launch directory is listed only where a module is imported from it (nothing else there is readable)
    listable = {os.path.abspath(p or ".") for p in sys.path} | ({launch_dir} if from_launch_dir else set())
    allowed = {q for p in readable if os.path.exists(p) for q in _without(p, sorted(_HIDDEN))}
    return sorted(allowed), sorted(p for p in listable if os.path.isdir(p))


def apply_reward_sandbox(functions: Sequence[_HasWorkerCallers], settings: RewardSandbox, processes: int = 1) -> str:
    """Share ``settings``' memory budget among the workers of ``functions``; returns a one-line summary.

    ``processes``: trainer processes on this machine (ranks), each with its own workers. Each
    sandboxed worker gets ``budget / (processes * workers per process)`` MB of address space;
    ``ValueError`` (naming the flags) when that is under ``MIN_WORKER_MB``.
    """
    settings.check_strict()
    callers = [c for f in functions for c in f.worker_callers() if c.limits is not None]
    if not callers:
        return "no reward runs in workers"
    for c in callers:
        if settings.workers is not None and not c.workers_explicit:
            c.workers = settings.workers
    total = sum(c.workers for c in callers) * max(1, processes)
    budget = settings.budget_mb()
    each = budget // total
    if each < MIN_WORKER_MB:
        raise ValueError(
            f"model.reward_sandbox.memory_mb={budget} shared by {total} reward workers leaves {each} MB each, "
            f"under the {MIN_WORKER_MB} MB a worker needs: raise model.reward_sandbox.memory_mb or lower "
            "model.reward_sandbox.workers (or a reward's own workers)"
        )
    note = (f"model.reward_sandbox.memory_mb={budget} shared by {total} workers: raise it, or lower "
            "model.reward_sandbox.workers")
    for c in callers:
        c.configure(address_space_mb=each, env=settings.env, read_paths=settings.read_paths,
                    strict=settings.strict, memory_note=note)
    ranks = f" ({processes} ranks on this machine)" if processes > 1 else ""
    return f"{total} reward workers{ranks}, {each} MB each of a {budget} MB budget (model.reward_sandbox.memory_mb)"
