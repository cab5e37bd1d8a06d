"""Layer four of the sandbox: kernel-enforced limits a worker installs on itself once it has started.

The layers above it are Python (the AST allow-list, the restricted runtime) plus rlimits; the most
trusted executors of untrusted code add a boundary the interpreter cannot talk its way out of. After
its imports, a worker:
1. sets `no_new_privs` and drops every capability it holds (a worker started as root can then no
   longer raise its own hard rlimits or override file permissions);
2. restricts the file system with **Landlock** where the kernel offers it (ABI >= 1): reading only
   beneath the interpreter's and the package's folders and the bundled fonts, no writing, creating
   or removing anywhere; from ABI 4 no TCP bind/connect, from ABI 6 no signals to processes outside
   the worker. Where Landlock is missing it carries on and says so (`KernelReport.landlock`);
3. loads a **seccomp** filter (libseccomp through `pyseccomp`, a ctypes binding with the API of
   libseccomp's own Python module, which is used instead when installed) that makes these calls fail
   with EPERM: process creation (fork, vfork, clone without CLONE_THREAD, execve, execveat; clone3
   gets ENOSYS so glibc falls back to the checked clone), networking (socket, socketpair, connect,
   bind, listen, accept), opening a file for writing (open/openat with O_WRONLY, O_RDWR, O_CREAT or
   O_TRUNC; creat; openat2, whose flags seccomp cannot see), changing the file system (unlink,
   rename, mkdir, link, chmod, chown, truncate, mknod, xattrs), signals to any process but itself,
   and the usual escape hatches (ptrace, process_vm_*, mount, unshare, setns, bpf, io_uring,
   userfaultfd, perf_event_open, keyctl, module loading).
Errors rather than kills: a denied call raises OSError inside the program, which then fails as a
normal `runtime` result instead of taking the worker (and its batch) down.

`Hardening` switches layers off for the tests that prove each layer holds on its own
(tests/bench/test_kernel.py); nothing else ever turns them off.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass, field
from typing import Iterable

_PR_SET_NO_NEW_PRIVS = 38
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_READ_FILE, _FS_READ_DIR = 1 << 2, 1 << 3
#: every file-system right Landlock knows, by the ABI that introduced it
_FS_ALL = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_ALL = 0b11  # BIND_TCP | CONNECT_TCP (ABI 4)
_SCOPE_ALL = 0b11  # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)
_CLONE_THREAD = 0x00010000
_O_ACCMODE, _O_WRONLY, _O_RDWR, _O_CREAT, _O_TRUNC = 0o3, 0o1, 0o2, 0o100, 0o1000

PROCESS_CALLS = ("fork", "vfork", "execve", "execveat")
NETWORK_CALLS = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4")
WRITE_CALLS = (
    "creat", "openat2", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat",
    "truncate", "ftruncate", "mknod", "mknodat", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
    "lremovexattr", "fremovexattr", "utime", "utimes", "utimensat", "futimesat",
)
ESCAPE_CALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "unshare",
    "setns", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "open_by_handle_at", "name_to_handle_at",
    "fanotify_init", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
)


@dataclass(frozen=True)
class Hardening:
    """Which layers a worker installs. All on, always; the switches exist only for the tests that
    show each layer holding with the others off (tests/bench/test_kernel.py)."""

    python_layers: bool = True  #: AST allow-list + restricted runtime; False runs the text as plain Python
    seccomp: bool = True  #: the system-call filter
    landlock: bool = True  #: the file-system (and, from ABI 4/6, network and signal) restriction
    drop_capabilities: bool = True  #: give up every capability (no_new_privs is set regardless)


@dataclass
class KernelReport:
    """What a worker managed to install (sent to the host once, logged there when something is missing)."""

    seccomp: str = "off"  #: "on", or why not
    landlock: str = "off"  #: "abi N", or why not
    capabilities: str = "off"  #: "dropped", or why not
    read_roots: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"seccomp": self.seccomp, "landlock": self.landlock, "capabilities": self.capabilities,
                "read_roots": list(self.read_roots)}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(libc: ctypes.CDLL, nr: int, *args: object) -> int:
    libc.syscall.restype = ctypes.c_long
    return int(libc.syscall(ctypes.c_long(nr), *args))


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers, 0 when it offers none."""
    libc = _libc()
    r = _syscall(libc, _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(r, 0)


def _install_landlock(read_roots: Iterable[str]) -> tuple[str, list[str]]:
    abi = landlock_abi()
    if abi < 1:
        return "unavailable: the kernel offers no Landlock (reads are not confined; seccomp still denies writes)", []
    libc = _libc()
    fs = _FS_ALL.get(abi, _FS_ALL[5])
    if abi >= 6:
        attr = struct.pack("=QQQ", fs, _NET_ALL, _SCOPE_ALL)
    elif abi >= 4:
        attr = struct.pack("=QQ", fs, _NET_ALL)
    else:
        attr = struct.pack("=Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _syscall(libc, _SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return f"unavailable: landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})", []
    granted = []
    try:
        for root in read_roots:
            try:
                pfd = os.open(root, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                allowed = _FS_READ_FILE | (_FS_READ_DIR if os.path.isdir(root) else 0)
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, pfd), 12)
                if _syscall(libc, _SYS_LANDLOCK_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), rule,
                            ctypes.c_uint32(0)) == 0:
                    granted.append(root)
            finally:
                os.close(pfd)
        if _syscall(libc, _SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return f"unavailable: landlock_restrict_self failed ({os.strerror(ctypes.get_errno())})", []
    finally:
        os.close(fd)
    return f"abi {abi}", granted


def _seccomp_module():
    try:  # libseccomp's own binding (Debian's python3-seccomp) when it is importable
        import seccomp  # type: ignore[import-not-found]

        return seccomp
    except ImportError:
        import pyseccomp  # the same API through ctypes over the system's libseccomp

        return pyseccomp


def _install_seccomp() -> str:
    try:
        sc = _seccomp_module()
        f = sc.SyscallFilter(sc.ALLOW)
    except (ImportError, RuntimeError, OSError) as e:
        return f"unavailable: {type(e).__name__}: {e}"
    deny = sc.ERRNO(errno.EPERM)
    missing = []

    def rule(action: int, name: str, *args: object) -> None:
        try:
            f.add_rule(action, name, *args)
        except (OSError, ValueError, RuntimeError):
            missing.append(name)  # not a system call on this architecture (open on arm64, say)

    for name in PROCESS_CALLS + NETWORK_CALLS + WRITE_CALLS + ESCAPE_CALLS:
        rule(deny, name)
    rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags live in memory seccomp cannot read
    rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD, 0))
    for name, flags_arg in (("open", 1), ("openat", 2)):
        rule(deny, name, sc.Arg(flags_arg, sc.MASKED_EQ, _O_ACCMODE, _O_WRONLY))
        rule(deny, name, sc.Arg(flags_arg, sc.MASKED_EQ, _O_ACCMODE, _O_RDWR))
        rule(deny, name, sc.Arg(flags_arg, sc.MASKED_EQ, _O_CREAT, _O_CREAT))
        rule(deny, name, sc.Arg(flags_arg, sc.MASKED_EQ, _O_TRUNC, _O_TRUNC))
    pid = os.getpid()
    for name in ("kill", "tkill", "tgkill"):  # kill(0, ...) or kill(-1, ...) would reach the host
        rule(deny, name, sc.Arg(0, sc.NE, pid))
    try:
        f.load()
    except OSError as e:
        return f"unavailable: seccomp_load failed ({e})"
    return "on"


def _drop_capabilities() -> str:
    libc = _libc()

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    hdr, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capset(ctypes.byref(hdr), data) != 0:
        return f"not dropped ({os.strerror(ctypes.get_errno())})"
    return "dropped"


def install(h: Hardening, read_roots: Iterable[str]) -> KernelReport:
    """Install the kernel layer on this process (irreversible); see the module docstring."""
    report = KernelReport()
    if h.seccomp:
        try:  # import (and find libseccomp, which may need a temporary file) before Landlock closes the disk
            _seccomp_module()
        except (ImportError, RuntimeError, OSError):
            pass  # reported by _install_seccomp below
    libc = _libc()
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if h.drop_capabilities:
        report.capabilities = _drop_capabilities()
    if h.landlock:
        report.landlock, report.read_roots = _install_landlock(read_roots)
    if h.seccomp:
        report.seccomp = _install_seccomp()
    return report


def read_roots() -> list[str]:
    """Folders a worker may read after the lock-down: the interpreter's, the installed packages', this
    package's own, and the bundled fonts (everything else, /etc and home folders included, is closed)."""
    import sys
    import sysconfig
    from pathlib import Path

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[1])}
    roots |= {v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
    from bench.svg.render import font_dir

    fonts = font_dir()
    if fonts is not None:
        roots.add(str(fonts))
    for lib in ("/lib", "/lib64", "/usr/lib", "/usr/lib64"):
        if os.path.isdir(lib):
            roots.add(lib)
    return sorted(r for r in roots if r and os.path.exists(r))
