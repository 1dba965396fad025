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
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWNET, _CLONE_NEWNS, _CLONE_NEWIPC = 0x40000000, 0x00020000, 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 0x40000
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
        io_uring_setup=425, io_uring_enter=426, io_uring_register=427, ptrace=101, process_vm_readv=310,
        process_vm_writev=311, unshare=272, setns=308, kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129,
        rt_tgsigqueueinfo=297, pidfd_send_signal=424, pidfd_open=434, pidfd_getfd=438, process_madvise=440,
        process_mrelease=448, kcmp=312, prlimit64=302, setpriority=141, getpriority=140,
        sched_setaffinity=203, sched_getaffinity=204, sched_setparam=142, sched_getparam=143,
        sched_setscheduler=144, sched_getscheduler=145, sched_rr_get_interval=148, sched_setattr=314,
        sched_getattr=315, ioprio_set=251, ioprio_get=252, setpgid=109, getpgid=121, getsid=124,
        migrate_pages=256, move_pages=279, get_robust_list=274, perf_event_open=298, memfd_create=319,
        memfd_secret=447, shmget=29, shmat=30, shmctl=31, semget=64, semop=65, semctl=66, semtimedop=220,
        msgget=68, msgsnd=69, msgrcv=70, msgctl=71, mq_open=240, mq_unlink=241, mq_timedsend=242,
        mq_timedreceive=243, mq_notify=244, mq_getsetattr=245, keyctl=250, add_key=248, request_key=249,
        bpf=321, userfaultfd=323, prctl=157, fcntl=72, ioctl=16,
    )),
    "aarch64": (0xC00000B7, dict(
        clone=220, execve=221, execveat=281, clone3=435, socket=198, socketpair=199,
        io_uring_setup=425, io_uring_enter=426, io_uring_register=427, ptrace=117, process_vm_readv=270,
        process_vm_writev=271, unshare=97, setns=268, kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138,
        rt_tgsigqueueinfo=240, pidfd_send_signal=424, pidfd_open=434, pidfd_getfd=438, process_madvise=440,
        process_mrelease=448, kcmp=272, prlimit64=261, setpriority=140, getpriority=141,
        sched_setaffinity=122, sched_getaffinity=123, sched_setparam=118, sched_getparam=121,
        sched_setscheduler=119, sched_getscheduler=120, sched_rr_get_interval=127, sched_setattr=274,
        sched_getattr=275, ioprio_set=30, ioprio_get=31, setpgid=154, getpgid=155, getsid=156,
        migrate_pages=238, move_pages=239, get_robust_list=100, perf_event_open=241, memfd_create=279,
        memfd_secret=447, shmget=194, shmat=196, shmctl=195, semget=190, semop=193, semctl=191,
        semtimedop=192, msgget=186, msgsnd=189, msgrcv=188, msgctl=187, mq_open=180, mq_unlink=181,
        mq_timedsend=182, mq_timedreceive=183, mq_notify=184, mq_getsetattr=185, keyctl=219, add_key=217,
        request_key=218, bpf=280, userfaultfd=282, prctl=167, fcntl=25, ioctl=29,
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


_DENIED = (
    "execve", "execveat", "socket", "socketpair", "ptrace", "process_vm_readv", "process_vm_writev", "unshare",
    "setns", "tkill", "pidfd_send_signal", "pidfd_open", "pidfd_getfd", "process_madvise", "process_mrelease",
    "kcmp", "migrate_pages", "move_pages", "get_robust_list", "perf_event_open", "memfd_create", "memfd_secret",
    "shmget", "shmat", "shmctl", "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv",
    "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "keyctl", "add_key", "request_key", "bpf", "userfaultfd",
)
"""Refused outright (EPERM): exec, sockets, reaching into other processes, and every kind of memory or
kernel object that could be shared with another process or outlive the caller (memfd, System V and
POSIX IPC, keyrings, BPF)."""
_SELF_ONLY = (
    "prlimit64", "sched_setaffinity", "sched_getaffinity", "sched_setparam", "sched_getparam",
    "sched_setscheduler", "sched_getscheduler", "sched_rr_get_interval", "sched_setattr", "sched_getattr",
    "setpgid", "getpgid", "getsid",
)
"""Calls whose first argument is a process id: allowed on 0 (the caller) or the caller's own pid only."""
_SIGNALS = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
"""Signals: only to the caller's own pid (not 0 or a negative pid: those reach process groups)."""
_PR_SET_PDEATHSIG = 1
_F_SETFL, _O_ASYNC = 4, 0o20000
_FCNTL_DENIED = (8, 10, 15, 1024, 1026, 1031)
"""``fcntl`` commands refused: ``F_SETOWN``, ``F_SETOWN_EX`` and ``F_SETSIG`` (which process a descriptor's
I/O signal goes to, and which signal: the kernel sends it with the setter's rights, so a call could name the
trainer and SIGKILL), ``F_SETLEASE`` and ``F_NOTIFY`` (signals on another process's access), ``F_SETPIPE_SZ``
(the size of a pipe another process holds). ``F_SETFL`` is refused when it sets ``O_ASYNC``."""
_IOCTL_DENIED = (0x5452, 0x8901, 0x8902)
"""``ioctl`` requests refused: ``FIOASYNC`` (``O_ASYNC`` by another path), ``FIOSETOWN`` and ``SIOCSPGRP``
(``F_SETOWN`` by other paths)."""


def seccomp_program(machine: str, pid: int, allow_fork: bool = False) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter (``(code, jt, jf, k)`` instructions) for process ``pid`` on ``machine``.

    Every syscall that takes another process's id acts on ``pid`` only; see ``_DENIED``,
    ``_SELF_ONLY`` and ``_SIGNALS``. ``prctl(PR_SET_PDEATHSIG)`` may only set SIGKILL, so the
    parent-death signal set before the filter cannot be removed. ``allow_fork``: ``fork`` and
    ``clone`` without ``CLONE_THREAD`` stay allowed (the zygote), else only threads may be created.
    """
    arch, nr = _ARCHES[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06

    def arg(i: int) -> tuple[int, int, int, int]:  # low 32 bits of argument i (little-endian)
        return (ld, 0, 0, 16 + 8 * i)

    def block(name: str, body: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        return [(jeq, 0, len(body), nr[name])] + body  # body ends in a return, so A keeps nr when skipped

    def allow_if(*conditions: tuple[int, tuple[int, ...]]) -> list[tuple[int, int, int, int]]:
        """Allow when, for each ``(i, values)``, argument ``i`` is one of ``values``; else EPERM."""
        body: list[tuple[int, int, int, int]] = []
        for k, (i, values) in enumerate(conditions):
            after = sum(1 + len(v) for _, v in conditions[k + 1:]) + 1  # later conditions, then the ALLOW
            body.append(arg(i))
            for j, value in enumerate(values):  # a match skips this condition's other values; the last miss: EPERM
                last = j == len(values) - 1
                body.append((jeq, len(values) - 1 - j, after if last else 0, value))
        return body + [(ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM)]

    prog: list[tuple[int, int, int, int]] = [
        (ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, _KILL),  # another ABI (i386 on x86_64): kill
        (ld, 0, 0, 0),
    ]
    if machine == "x86_64":
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, _EPERM)]  # x32 syscalls
    for name in _DENIED + (() if allow_fork else ("fork", "vfork")):
        if name in nr:
            prog += block(name, [(ret, 0, 0, _EPERM)])
    for name in ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"):
        prog += block(name, [(ret, 0, 0, _ENOSYS)])  # glibc falls back from clone3 to clone
    if not allow_fork:
        prog += block("clone", [arg(0), (jset, 0, 1, _CLONE_THREAD), (ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM)])
    for name in _SELF_ONLY:
        prog += block(name, allow_if((0, (0, pid))))
    for name in _SIGNALS:
        prog += block(name, allow_if((0, (pid,))))
    # setpriority/getpriority(which, who): PRIO_PROCESS (0) and who in {0, pid};
    # ioprio_set/get(which, who): IOPRIO_WHO_PROCESS (1) and who in {0, pid}
    for names, which in ((("setpriority", "getpriority"), 0), (("ioprio_set", "ioprio_get"), 1)):
        for name in names:
            prog += block(name, allow_if((0, (which,)), (1, (0, pid))))
    prog += block("prctl", [arg(0), (jeq, 0, 3, _PR_SET_PDEATHSIG), arg(1), (jeq, 1, 0, 9), (ret, 0, 0, _EPERM),
                            (ret, 0, 0, _ALLOW)])
    # fcntl(fd, cmd, arg): no owner, signal, lease or notify settings; F_SETFL without O_ASYNC only
    n = len(_FCNTL_DENIED)
    prog += block("fcntl", [arg(1)] + [(jeq, n - j + 3, 0, cmd) for j, cmd in enumerate(_FCNTL_DENIED)]
                  + [(jeq, 0, 2, _F_SETFL), arg(2), (jset, 1, 0, _O_ASYNC), (ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM)])
    # ioctl(fd, request, ...): not the owner or O_ASYNC by another name
    n = len(_IOCTL_DENIED)
    prog += block("ioctl", [arg(1)] + [(jeq, n - j, 0, req) for j, req in enumerate(_IOCTL_DENIED)]
                  + [(ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM)])
    prog += [(ret, 0, 0, _ALLOW)]
    assert all(jt < 256 and jf < 256 for _, jt, jf, _ in prog)
    return prog


def _machine() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _seccomp(libc: Any, allow_fork: bool = False) -> str:
    """Install ``seccomp_program`` for this process (classic BPF through prctl, no libseccomp)."""
    machine = _machine()
    if machine not in _ARCHES:
        raise OSError(0, f"no seccomp syscall table for {machine}")
    prog = seccomp_program(machine, os.getpid(), allow_fork)
    raw = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filt))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    _check(_sys(libc, "prctl", _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fbuf, 0, 0), "seccomp")
    return ("seccomp: no new processes, exec, sockets, memfd, System V or POSIX IPC, keyrings; "
            "calls that take a process id act on the worker itself only; no descriptor owner, I/O signal or "
            "O_ASYNC settings (fcntl, ioctl)")


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
