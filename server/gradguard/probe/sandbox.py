"""Keeping the user's code from doing harm.  No torch here.

Layers, strongest first:

1. Kernel namespaces (``unshare``): the worker runs in a new **network namespace** (only a loopback
   device that is down: every connection fails, 127.0.0.1 included) and a new **mount namespace**
   in which every file system is remounted read-only except the probe's own temporary folder
   (``/proc``, ``/sys`` and ``/dev`` are left alone: ``/dev/shm`` stays writable).  This binds C
   code and subprocesses as well as Python.  Needs root or unprivileged user namespaces.
2. An audit hook (``sys.addaudithook``, installed before the user's code, cannot be removed) that
   refuses Python-level writes outside the temporary folder and Internet sockets
   (connect/bind/sendto/DNS), and records each refusal so the result can say what was blocked.
   C extensions and ctypes can get around it; it is there to name what happened, and to protect
   where namespaces are not available.
3. ``RLIMIT_AS`` (address space) in the probed process, and a wall-clock timeout enforced by the
   worker (SIGTERM, then SIGKILL of the process group).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import shutil
import socket
import subprocess
import sys

# --- parent side: can we use namespaces here? -------------------------------------------------------


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` command line that gives a new network and mount namespace, or None."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return None
    plain = (unshare, "--net", "--mount")
    mapped = (unshare, "--map-root-user", "--net", "--mount")
    for prefix in ((plain, mapped) if os.geteuid() == 0 else (mapped, plain)):
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return None


# --- worker side: read-only files ---------------------------------------------------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_KEEP = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": 1024,
         "nodiratime": 2048, "relatime": 1 << 21, "strictatime": 1 << 24}
_LEAVE = ("/proc", "/sys", "/dev")


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape")


def make_read_only(writable: str) -> dict:
    """In a fresh mount namespace: remount everything read-only except ``writable``.

    Returns what was done: ``{"read_only_files": bool, "left_writable": [...]}``.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

    def mount(source, target, flags) -> int:
        done = libc.mount(source and source.encode(), target.encode(), None, flags, None)
        return 0 if done == 0 else ctypes.get_errno()

    if mount(None, "/", _MS_REC | _MS_PRIVATE):  # our changes must never reach the host
        return {"read_only_files": False, "left_writable": ["/"]}
    if mount(writable, writable, _MS_BIND | _MS_REC):
        return {"read_only_files": False, "left_writable": ["/"]}
    left = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        mounts = [(_unescape(line.split()[4]), line.split()[5].split(",")) for line in f]
    for point, options in mounts:
        if point == writable or any(point == p or point.startswith(p + "/") for p in _LEAVE):
            continue
        if "ro" in options:
            continue
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for option in options:
            flags |= _KEEP.get(option, 0)
        if mount(None, point, flags):
            left.append(point)
    root_ro = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
    return {"read_only_files": root_ro and "/" not in left, "left_writable": left}


def is_read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# --- child side: limits and the audit guard -----------------------------------------------------------


def limit_memory(megabytes: int | None) -> str | None:
    """Cap the address space; returns why it could not be done, or None."""
    if not megabytes:
        return None
    limit = megabytes * 1024 * 1024
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY and hard < limit:
            limit = hard
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError) as exc:
        return str(exc)
    return None


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NET_FAMILIES = {socket.AF_INET, socket.AF_INET6}
_PATH_EVENTS = {  # audit event -> indexes of the path arguments it writes
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (1,),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.mkfifo": (0,), "os.mknod": (0,), "shutil.copyfile": (1,),
    "shutil.copytree": (1,), "shutil.move": (0, 1), "shutil.rmtree": (0,), "shutil.make_archive": (0,),
}
_NET_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
_DNS_EVENTS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex",
               "socket.getnameinfo"}
_WATCHED = frozenset({"open"} | set(_PATH_EVENTS) | _NET_EVENTS | _DNS_EVENTS)


def _local_name(host) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Guard:
    """The audit hook.  ``blocked`` lists what it refused, for the result."""

    def __init__(self, writable: list[str]):
        self.writable = tuple(os.path.join(os.path.realpath(w), "") for w in writable)
        self.exact = {os.devnull}
        self.blocked: list[str] = []

    def _allowed(self, path) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        try:
            path = os.fsdecode(os.fspath(path))
        except TypeError:
            return True
        real = os.path.realpath(path)
        return real in self.exact or (real + "/").startswith(self.writable) or real.startswith("/dev/")

    def _refuse(self, what: str):
        if len(self.blocked) < 50:
            self.blocked.append(what)
        raise PermissionError(errno.EACCES, f"gradguard probe: {what} is blocked")

    def __call__(self, event: str, args: tuple) -> None:
        if event not in _WATCHED:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
            if writes and not self._allowed(path):
                self._refuse(f"writing {os.fsdecode(path) if not isinstance(path, int) else path}")
        elif event in _NET_EVENTS:
            sock = args[0] if args else None
            if getattr(sock, "family", None) in _NET_FAMILIES:
                address = args[1] if len(args) > 1 else ""
                self._refuse(f"network access ({event.split('.')[1]} to {address})")
        elif event in _DNS_EVENTS:
            host = args[0] if args else None
            if not _local_name(host):  # numeric addresses resolve without the network; connect decides
                self._refuse(f"network access (name lookup of {host})")
        else:
            for index in _PATH_EVENTS[event]:
                if index < len(args) and args[index] is not None and not self._allowed(args[index]):
                    self._refuse(f"{event} on {os.fsdecode(args[index])}")


def install_guard(writable: list[str]) -> Guard:
    guard = Guard(writable)
    sys.addaudithook(guard)
    return guard


def private_environment(workdir: str) -> None:
    """Point every cache and temp folder a library might write to into the probe's folder."""
    for name in ("HOME", "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCH_HOME",
                 "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "HF_HOME"):
        os.environ[name] = workdir
    import tempfile

    tempfile.tempdir = None
