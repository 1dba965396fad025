"""OS confinement of a reward worker: model output is untrusted input.

Reward code may execute the completion (reasoning-gym's ``sympy.parse_expr``
``eval``s it), so a worker confines itself before it imports or runs anything
that sees a completion. ``apply_sandbox`` runs first in the worker, while the
process has one thread, so every thread it starts later inherits the same
confinement. What it enforces, best effort and reported, never assumed:

* a throwaway working directory (also ``TMPDIR``), removed by the parent;
* hard resource limits: address space, CPU seconds, open files, file size, no
  core dumps (soft = hard, and with capabilities dropped they cannot be raised);
* ``no_new_privs`` and, when root, all capabilities dropped (so root cannot
  raise limits, mount, load modules, or bypass file permissions);
* Linux Landlock (5.13+): no writing, creating, removing or executing files
  outside the working directory (``/dev/null`` stays writable), and no reading
  outside the paths the trainer allows (``settings.read_roots``: the
  Python installation, system libraries, the imported packages); with Landlock
  ABI 4+ no TCP bind/connect, with ABI 6+ no signals to processes outside the
  sandbox and no abstract Unix sockets;
* a seccomp filter (x86_64, aarch64, ``seccomp_program``): no new processes
  (``fork``, ``clone`` without ``CLONE_THREAD``; threads are allowed), no
  ``exec``, no new sockets, no ``io_uring``, no ``ptrace``, no
  ``unshare``/``setns``; every call that takes a process id (``prlimit``,
  ``setpriority``, ``sched_setaffinity``, signals, pidfds, ...) acts on the
  worker itself only; no descriptor owner or I/O signal (``fcntl`` ``F_SETOWN``,
  ``F_SETSIG``, ``O_ASYNC``, their ``ioctl`` forms: the kernel would signal the
  named process with the worker's rights, SIGKILL included); no memfd, System V
  or POSIX IPC, keyrings or BPF (memory outside the address-space limit, or
  objects that outlive the worker);
* the parent-death signal (SIGKILL when the trainer dies), set before the filter,
  which refuses to change it (``die_with_parent``);
* a new network namespace (no interfaces) when root.

On Linux without Landlock (kernels before 5.13, or Landlock not in the
``lsm=`` list), writes outside the working directory are not prevented; on
other architectures than x86_64 and aarch64 there is no seccomp filter (so
child processes, exec and, without Landlock ABI 4, the network stay open);
elsewhere (macOS) only the working directory and resource limits apply
(``RLIMIT_NPROC`` is not used: it counts the user's processes and threads
system-wide, and does not bind root). The report says which, and the parent
logs it once (a warning when something is not enforced).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Sequence

from lit_rlvr.rewards.workers.seccomp import _ARCHES, _PR_SET_PDEATHSIG, _check, _libc, _machine, _seccomp, _sys


@dataclass(frozen=True)
class SandboxLimits:
    """Hard resource limits of a reward worker (per worker process)."""

    address_space_mb: int = 8192
    """Virtual memory (``RLIMIT_AS``); an allocation beyond it raises ``MemoryError``."""
    cpu_seconds: int = 3600
    """CPU time of each process (``RLIMIT_CPU``): the zygote, and each call's own process afresh."""
    open_files: int = 256
    """Open file descriptors (``RLIMIT_NOFILE``)."""
    file_size_mb: int = 1024
    """Largest file the worker may write in its directory (``RLIMIT_FSIZE``)."""
    workdir_mb: int = 64
    """Size of the worker's directory, all files together (a private tmpfs; needs root, see ``apply_sandbox``)."""

    def __post_init__(self) -> None:
        for name in ("address_space_mb", "cpu_seconds", "open_files", "file_size_mb", "workdir_mb"):
            if not int(getattr(self, name)) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


# --------------------------------------------------------------------------- Linux constants

_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNET, _CLONE_NEWNS, _CLONE_NEWIPC = 0x40000000, 0x00020000, 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 0x40000

# Landlock filesystem rights (uapi/linux/landlock.h)
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 4, 1 << 5
_FS_MAKE_CHAR, _FS_MAKE_DIR, _FS_MAKE_REG, _FS_MAKE_SOCK = 1 << 6, 1 << 7, 1 << 8, 1 << 9
_FS_MAKE_FIFO, _FS_MAKE_BLOCK, _FS_MAKE_SYM, _FS_REFER, _FS_TRUNCATE = 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1



# --------------------------------------------------------------------------- the pieces


def _set_limits(limits: SandboxLimits) -> str:
    import resource

    mb = 2**20
    wanted = {
        "RLIMIT_AS": limits.address_space_mb * mb,
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_FSIZE": limits.file_size_mb * mb,
        "RLIMIT_CORE": 0,
    }
    set_ = []
    for name, value in wanted.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
        set_.append(name[7:].lower())
    return "hard limits on " + ", ".join(set_)


def _drop_capabilities(libc: Any) -> None:
    """capset(2) with empty effective, permitted and inheritable sets (v3: two 32-bit words)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")


_SIGNAL_SCOPE_ABI = 6
"""The first Landlock ABI (Linux 6.12) that scopes signals: none to a process outside the caller's domain."""


def landlock_abi(libc: Any, simulate_missing: Sequence[str] = ()) -> int:
    """The kernel's Landlock ABI (0 without Landlock); capped below signal scoping when ``signal_scope`` is simulated missing."""
    if "landlock" in simulate_missing:
        return 0
    abi = max(0, _sys(libc, "syscall", 444, None, 0, 1))  # landlock_create_ruleset(NULL, 0, VERSION)
    return min(abi, _SIGNAL_SCOPE_ABI - 1) if "signal_scope" in simulate_missing else abi


def _landlock(libc: Any, workdir: str, readable: Sequence[str], listable: Sequence[str],
              abi: int) -> tuple[str, bool, bool]:
    """Writes only in ``workdir``, reads only under ``readable`` (and listing ``listable``), at Landlock ``abi``.

    Returns (description, network denied, signals scoped).
    """
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not available in this kernel")
    fs = (_FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE
          | _FS_MAKE_CHAR | _FS_MAKE_DIR | _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK | _FS_MAKE_SYM)
    fs |= (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= _SIGNAL_SCOPE_ABI else 0
    attr = struct.pack("QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(_sys(libc, "syscall", 444, buf, len(attr), 0), "landlock_create_ruleset")
    file_write = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
    rules = [(workdir, fs & ~(_FS_EXECUTE | _FS_MAKE_CHAR | _FS_MAKE_BLOCK)), ("/dev/null", file_write | _FS_READ_FILE)]
    rules += [(p, _FS_READ_FILE | (_FS_READ_DIR if os.path.isdir(p) else 0)) for p in readable]
    rules += [(p, _FS_READ_DIR) for p in listable if os.path.isdir(p)]
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone or unreachable: nothing to allow
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
                _check(_sys(libc, "syscall", 445, ruleset, 1, rule, 0), f"landlock_add_rule({path})")
            finally:
                os.close(fd)
        _check(_sys(libc, "syscall", 446, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    desc = (f"landlock ABI {abi}: no writes or exec outside the working directory, reads only under "
            f"{len(readable)} allowed paths (the Python installation, system libraries, imported packages)")
    return desc, bool(net), bool(scoped)


def _private_tmpfs(libc: Any, workdir: str, size_mb: int) -> str:
    """Mount a ``size_mb`` tmpfs on ``workdir`` in this (new, private) mount namespace; it dies with it."""
    _check(_sys(libc, "mount", b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    opts = f"size={size_mb}m,mode=0700".encode()
    _check(_sys(libc, "mount", b"tmpfs", workdir.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts), "mount tmpfs")
    os.chdir(workdir)  # the mount, not the directory under it
    return f"a private {size_mb} MB tmpfs (gone with the worker)"


def _scope_signals(libc: Any) -> None:
    """A nested Landlock domain that only scopes signals and abstract sockets (ABI 6+): from here on this
    process cannot signal its zygote either, which shares the outer domain."""
    attr = struct.pack("QQQ", 0, 0, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(_sys(libc, "syscall", 444, buf, len(attr), 0), "landlock_create_ruleset(scope)")
    try:
        _check(_sys(libc, "syscall", 446, ruleset, 0), "landlock_restrict_self(scope)")
    finally:
        os.close(ruleset)


def confine_call(scope_signals: bool = False) -> None:
    """In a call's child, forked by a confined zygote: signals scoped to itself (``scope_signals``, when the
    zygote's Landlock scopes them), then the seccomp filter again, now without ``fork``.

    The zygote's own filter (``allow_fork``) still applies; the two together let calls that take a
    process id act on neither the zygote nor any other process.
    """
    libc = _libc()
    if scope_signals:
        _scope_signals(libc)
    _seccomp(libc)


# --------------------------------------------------------------------------- entry point


FEATURES = ("landlock", "signal_scope", "seccomp", "namespaces")
"""Kernel features the sandbox uses; ``SIMULATE_MISSING_ENV`` may name some to act as if they were absent."""
SIMULATE_MISSING_ENV = "LIT_RLVR_SANDBOX_SIMULATE_MISSING"
"""Comma-separated ``FEATURES`` the trainer treats as missing (to see and test what happens without them);
``signal_scope`` caps Landlock below ABI 6, as on a Linux 5.13-6.11 kernel."""
_NO_SIGNAL_SCOPE = ("Landlock signal scoping (ABI 6, Linux 6.12+): signals from reward code to other processes, "
                    "I/O signals (fcntl F_SETOWN) included, are refused by the seccomp filter alone")


def simulated_missing() -> tuple[str, ...]:
    """The features ``SIMULATE_MISSING_ENV`` names (``ValueError`` on an unknown one)."""
    names = tuple(n.strip() for n in os.environ.get(SIMULATE_MISSING_ENV, "").split(",") if n.strip())
    for n in names:
        if n not in FEATURES:
            raise ValueError(f"{SIMULATE_MISSING_ENV}={n!r}: expected some of {', '.join(FEATURES)}")
    return names


def missing_features(simulate_missing: Sequence[str] = ()) -> list[str]:
    """Kernel features the sandbox needs and this system lacks, checked here without starting a worker.

    Each entry names the feature and what is not enforced without it (``describe``'s words); used by
    ``model.reward_sandbox.strict`` to refuse a fit before any reward code runs.
    """
    if not sys.platform.startswith("linux"):
        return [f"Linux ({sys.platform}): no write, network or process restrictions"]
    libc = _libc()
    missing = []
    abi = landlock_abi(libc, simulate_missing)
    if abi < 1:
        missing.append("Landlock (Linux 5.13+, in the lsm= list): reads and writes outside the worker's directory "
                       "are not confined")
    elif abi < _SIGNAL_SCOPE_ABI:
        missing.append(f"{_NO_SIGNAL_SCOPE} (this kernel has Landlock ABI {abi})")
    if "seccomp" in simulate_missing or _machine() not in _ARCHES or _sys(libc, "prctl", 21, 0, 0, 0, 0) < 0:
        missing.append("seccomp filters (x86_64 or aarch64): system calls on other processes, child processes, "
                       "exec, sockets, memfd and System V IPC are not refused")
    if "namespaces" in simulate_missing or os.geteuid() != 0 or not os.path.exists("/proc/self/ns/mnt"):
        missing.append("private namespaces (root): the worker's directory has no size limit")
    return missing


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``); exit now if it already has.

    Called before the seccomp filter, which then refuses any other parent-death signal.
    """
    if sys.platform.startswith("linux"):
        _check(_sys(_libc(), "prctl", _PR_SET_PDEATHSIG, 9, 0, 0, 0), "PR_SET_PDEATHSIG")
    if os.getppid() != parent_pid:
        os._exit(1)


def apply_sandbox(
    workdir: str, limits: SandboxLimits, readable: Sequence[str] = (), listable: Sequence[str] = (),
    allow_fork: bool = False, simulate_missing: Sequence[str] = (),
) -> dict[str, Any]:
    """Confine this (single-threaded) process; returns what is enforced and what is not.

    ``readable``: files and directories it may still read; ``listable``: directories it may list.
    ``allow_fork``: keep ``fork`` (a zygote whose children add their own filter, ``confine_call``).
    ``simulate_missing``: ``FEATURES`` to act as if the kernel lacked.
    Keys: ``workdir``, ``limits``, ``filesystem``, ``reads``, ``network``, ``processes``
    (each a description, or ``""`` when not enforced) and ``missing`` (why not).
    """
    report: dict[str, Any] = dict(workdir="", limits="", filesystem="", reads="", network="", processes="",
                                  signals="", workdir_size="", missing=[])
    missing: list[str] = report["missing"]
    os.chdir(workdir)
    for var in ("TMPDIR", "TEMP", "TMP"):
        os.environ[var] = workdir
    tempfile.tempdir = workdir
    report["workdir"] = workdir
    if not sys.platform.startswith("linux"):
        try:
            report["limits"] = _set_limits(limits)
        except Exception as e:  # noqa: BLE001 - reported
            missing.append(f"resource limits: {e}")
        missing.append(f"no write, network or process restrictions on {sys.platform} (Linux only)")
        return report
    libc = _libc()
    network: list[str] = []
    why = ("namespaces are not available (simulated)" if "namespaces" in simulate_missing
           else "" if os.geteuid() == 0 else "they need root")
    if not why and _sys(libc, "unshare", _CLONE_NEWNET | _CLONE_NEWNS | _CLONE_NEWIPC) != 0:
        why = f"unshare: {os.strerror(ctypes.get_errno())}"
    if not why:
        network.append("empty network namespace")
        try:
            report["workdir_size"] = _private_tmpfs(libc, workdir, limits.workdir_mb)
        except OSError as e:
            why = str(e)
    if why:
        missing.append(f"the working directory's size is NOT limited, only each file's ({why})")
    try:
        report["limits"] = _set_limits(limits)
    except Exception as e:  # noqa: BLE001
        missing.append(f"resource limits: {e}")
    _check(_sys(libc, "prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if os.geteuid() == 0:
        try:
            _drop_capabilities(libc)
        except OSError as e:
            missing.append(f"dropping root's capabilities: {e}")
    try:
        if "landlock" in simulate_missing:
            raise OSError(0, "Landlock is not available in this kernel (simulated)")
        abi = landlock_abi(libc, simulate_missing)
        desc, net_denied, scoped = _landlock(libc, workdir, readable, listable, abi)
        report["filesystem"] = desc
        report["reads"] = "confined"
        if net_denied:
            network.append("landlock: no TCP")
        if scoped:
            report["signals"] = "landlock: no signals to processes outside the sandbox, each call scoped to itself"
        else:
            missing.append(f"{_NO_SIGNAL_SCOPE} (Landlock ABI {abi}"
                           f"{', capped (simulated)' if 'signal_scope' in simulate_missing else ''})")
    except OSError as e:
        missing.append(f"reads and writes outside the working directory are NOT prevented ({e})")
    try:
        if "seccomp" in simulate_missing:
            raise OSError(0, "seccomp is not available in this kernel (simulated)")
        report["processes"] = _seccomp(libc, allow_fork)
        network.append("seccomp: no new sockets")
    except OSError as e:
        missing.append(f"seccomp: system calls on other processes, child processes, exec, sockets, memfd and "
                       f"System V IPC are NOT prevented ({e})")
    report["network"] = "; ".join(network)
    if not network:
        missing.append("network access is NOT prevented")
    return report


_SHORT_NAMES = (("filesystem", "Landlock"), ("signals", "signal scoping"), ("processes", "seccomp"),
                ("workdir_size", "private tmpfs"), ("limits", "resource limits"), ("network", "no network"))


def describe(report: dict[str, Any], detail: bool = False) -> str:
    """What the sandbox enforces and what it does not: one short line, or (``detail``) every part in full."""
    if detail:
        parts = [f"working directory {os.path.dirname(report['workdir'])}/lit-rlvr-reward-*"]
        parts += [report[k] for k in ("workdir_size", "limits", "filesystem", "signals", "network", "processes")
                  if report.get(k)]
        text = "reward workers are sandboxed: " + "; ".join(parts)
        if report.get("missing"):
            text += ". NOT enforced here: " + "; ".join(report["missing"])
        return text
    text = "reward sandbox: " + ", ".join(n for k, n in _SHORT_NAMES if report.get(k))
    if report.get("missing"):
        text += "; NOT enforced here: " + "; ".join(m.split(" (")[0] for m in report["missing"])
    return text + " (docs/security.md; details at debug level)"
