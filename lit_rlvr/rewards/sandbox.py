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
  outside the paths the trainer allows (``sandbox_settings.read_roots``: the
  Python installation, system libraries, the imported packages); with Landlock
  ABI 4+ no TCP bind/connect, with ABI 6+ no signals to processes outside the
  sandbox and no abstract Unix sockets;
* a seccomp filter (x86_64, aarch64): no new processes (``fork``, ``clone``
  without ``CLONE_THREAD``; threads are allowed), no ``exec``, no new sockets,
  no ``io_uring``, no ``ptrace``, no ``unshare``/``setns``, and signals only to
  the worker itself;
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
import platform
import struct
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class SandboxLimits:
    """Hard resource limits of a reward worker (per worker process)."""

    address_space_mb: int = 8192
    """Virtual memory (``RLIMIT_AS``); an allocation beyond it raises ``MemoryError``."""
    cpu_seconds: int = 3600
    """CPU time over the worker's life (``RLIMIT_CPU``); the worker retires at half of it."""
    open_files: int = 256
    """Open file descriptors (``RLIMIT_NOFILE``)."""
    file_size_mb: int = 1024
    """Largest file the worker may write in its directory (``RLIMIT_FSIZE``)."""

    def __post_init__(self) -> None:
        for name in ("address_space_mb", "cpu_seconds", "open_files", "file_size_mb"):
            if not int(getattr(self, name)) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


# --------------------------------------------------------------------------- Linux constants

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWNET = 0x40000000
_CLONE_THREAD = 0x00010000

# Landlock filesystem rights (uapi/linux/landlock.h)
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 4, 1 << 5
_FS_MAKE_CHAR, _FS_MAKE_DIR, _FS_MAKE_REG, _FS_MAKE_SOCK = 1 << 6, 1 << 7, 1 << 8, 1 << 9
_FS_MAKE_FIFO, _FS_MAKE_BLOCK, _FS_MAKE_SYM, _FS_REFER, _FS_TRUNCATE = 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

# seccomp: (audit arch, {name: syscall number}); x86_64 also has the x32 bit to refuse
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, dict(
        clone=56, fork=57, vfork=58, execve=59, execveat=322, clone3=435, socket=41, socketpair=53,
        io_uring_setup=425, ptrace=101, process_vm_readv=310, process_vm_writev=311, unshare=272,
        setns=308, kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297,
        pidfd_send_signal=424,
    )),
    "aarch64": (0xC00000B7, dict(
        clone=220, execve=221, execveat=281, clone3=435, socket=198, socketpair=199,
        io_uring_setup=425, ptrace=117, process_vm_readv=270, process_vm_writev=271, unshare=97,
        setns=268, kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240,
        pidfd_send_signal=424,
    )),
}
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _sys(libc: Any, fn: str, *args: Any) -> int:
    """Call a variadic libc function with integer arguments widened to ``long``."""
    return getattr(libc, fn)(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args))


def _check(rc: int, what: str) -> int:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


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


def _landlock(libc: Any, workdir: str, readable: Sequence[str], listable: Sequence[str]) -> tuple[str, bool, bool]:
    """Writes only in ``workdir``, reads only under ``readable`` (and listing ``listable``).

    Returns (description, network denied, signals scoped).
    """
    abi = _sys(libc, "syscall", 444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION)
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not available in this kernel")
    fs = (_FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE
          | _FS_MAKE_CHAR | _FS_MAKE_DIR | _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK | _FS_MAKE_SYM)
    fs |= (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
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


def _seccomp(libc: Any) -> str:
    """Install the filter described in the module docstring (classic BPF, no libseccomp)."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if machine not in _ARCHES:
        raise OSError(0, f"no seccomp syscall table for {machine}")
    arch, nr = _ARCHES[machine]
    pid = os.getpid()
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog: list[tuple[int, int, int, int]] = [
        (ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, _KILL),  # another ABI (i386 on x86_64): kill
        (ld, 0, 0, 0),
    ]
    if machine == "x86_64":
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, _EPERM)]  # x32 syscalls
    for name in ("fork", "vfork", "execve", "execveat", "socket", "socketpair", "ptrace", "unshare",
                 "setns", "process_vm_readv", "process_vm_writev", "tkill", "pidfd_send_signal"):
        if name in nr:
            prog += [(jeq, 0, 1, nr[name]), (ret, 0, 0, _EPERM)]
    prog += [(jeq, 0, 1, nr["clone3"]), (ret, 0, 0, _ENOSYS)]  # glibc falls back to clone
    prog += [(jeq, 0, 1, nr["io_uring_setup"]), (ret, 0, 0, _ENOSYS)]
    # clone: threads only; signals: only to this process (args[0] low word, little-endian)
    prog += [(jeq, 0, 4, nr["clone"]), (ld, 0, 0, 16), (jset, 0, 1, _CLONE_THREAD), (ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM)]
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        prog += [(jeq, 0, 4, nr[name]), (ld, 0, 0, 16), (jeq, 0, 1, pid), (ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM)]
    prog += [(ret, 0, 0, _ALLOW)]
    raw = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filt))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    _check(_sys(libc, "prctl", _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fbuf, 0, 0), "seccomp")
    return "seccomp: no new processes, exec, sockets, ptrace or signals to other processes"


# --------------------------------------------------------------------------- entry point


def apply_sandbox(
    workdir: str, limits: SandboxLimits, readable: Sequence[str] = (), listable: Sequence[str] = ()
) -> dict[str, Any]:
    """Confine this (single-threaded) process; returns what is enforced and what is not.

    ``readable``: files and directories it may still read; ``listable``: directories it may list.
    Keys: ``workdir``, ``limits``, ``filesystem``, ``reads``, ``network``, ``processes``
    (each a description, or ``""`` when not enforced) and ``missing`` (why not).
    """
    report: dict[str, Any] = dict(workdir="", limits="", filesystem="", reads="", network="", processes="", missing=[])
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
    if os.geteuid() == 0:
        if _sys(libc, "unshare", _CLONE_NEWNET) == 0:
            network.append("empty network namespace")
        else:
            missing.append(f"network namespace: {os.strerror(ctypes.get_errno())}")
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
        desc, net_denied, _ = _landlock(libc, workdir, readable, listable)
        report["filesystem"] = desc
        report["reads"] = "confined"
        if net_denied:
            network.append("landlock: no TCP")
    except OSError as e:
        missing.append(f"reads and writes outside the working directory are NOT prevented ({e})")
    try:
        report["processes"] = _seccomp(libc)
        network.append("seccomp: no new sockets")
    except OSError as e:
        missing.append(f"child processes, exec and sockets are NOT prevented ({e})")
    report["network"] = "; ".join(network)
    if not network:
        missing.append("network access is NOT prevented")
    return report


def describe(report: dict[str, Any]) -> str:
    """One log line: what the sandbox enforces and what it does not."""
    parts = [f"working directory {os.path.dirname(report['workdir'])}/lit-rlvr-reward-*"]
    parts += [report[k] for k in ("limits", "filesystem", "network", "processes") if report.get(k)]
    text = "reward workers are sandboxed: " + "; ".join(parts)
    if report.get("missing"):
        text += ". NOT enforced here: " + "; ".join(report["missing"])
    return text
