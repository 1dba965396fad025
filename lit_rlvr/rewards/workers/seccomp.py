"""The seccomp filter of a reward worker, written by hand as classic BPF (no libseccomp), and the libc calls
the confinement makes.

``seccomp_program`` is the filter for one process: every system call that takes another process's id acts on
that process only, processes, exec, sockets and every object shared with another process or outliving the
caller are refused, and so are a descriptor's owner, I/O signal and ``O_ASYNC``. ``confinement`` installs it
(``_seccomp``) with the rest of the sandbox; docs/security.md lists what it refuses on which kernel.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from typing import Any

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_THREAD = 0x00010000

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
