"""Keeping the user's code from doing harm.  No torch here.  docs/security.md has the threat model.

The probe runs code from repositories the user has just cloned, so it assumes that code is hostile.
Layers (each is reported in ``ProbeResult.sandbox["layers"]``; a missing one makes the probe refuse
unless the user passes ``--allow-missing-layers``; ``--no-isolation`` turns all kernel layers off):

- **worker** (``runner`` starts it as ``unshare --user --map-root-user --net --mount --pid --fork``):
  a user namespace, a network namespace with no interface up, a PID namespace whose init is the
  worker, and a mount namespace in which every file system is read-only, ``/proc`` is the PID
  namespace's own (read-only), and ``/dev`` is a small tmpfs with only null, zero, full, random,
  urandom (and the NVIDIA devices when present) bound in.  ``setup_worker_mounts``.
- **child** (one per probe, forked by the worker): its own mount namespace with a fresh tmpfs on
  ``/tmp`` (the target's folder bound back read-only when it lives under ``/tmp``) and on
  ``/dev/shm``, both gone with the child; an environment reduced to an allow-list; every file
  descriptor but its result pipe closed; ``RLIMIT_AS``, ``RLIMIT_NPROC``, no core dumps; then all
  capabilities dropped (bounding set too), ``no_new_privs`` and a seccomp filter.  ``lock_down``.
- **worker, after each probe**: kills every process left in the PID namespace (``kill(-1)`` from
  its init), and while the probe runs it sums the memory (PSS) of the whole tree and of the tmpfs
  folders, and kills the tree when the sum passes the limit.
- an audit hook (``Guard``) that names Python-level writes and network use it refuses; without
  namespaces it also refuses starting programs and sqlite databases outside the working folder.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import resource
import shutil
import socket
import struct
import subprocess
import sys

# --- parent side: can we use namespaces here? -------------------------------------------------------

_FULL = ("--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--kill-child")


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` command line that gives the worker its namespaces, or None.

    Prefers all of them (user, network, mount, PID); as root without user namespaces, the same
    without ``--user``; then the old network + mount pair.  The worker reports which layers it got."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return None
    candidates = [(unshare, *_FULL)]
    if os.geteuid() == 0:
        candidates.append((unshare, "--net", "--mount", "--pid", "--fork", "--kill-child"))
    candidates += [(unshare, "--map-root-user", "--net", "--mount"), (unshare, "--net", "--mount")]
    for prefix in candidates:
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return None


# The environment the worker and the user's code see: nothing else from the caller's shell passes.
# PYTHONPATH is how the user's code finds its own packages (what runs must be what the user runs), not a secret.
_ENV_NAMES = {"PATH", "PYTHONPATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "MALLOC_ARENA_MAX",
              "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "NO_COLOR"}
_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "CUBLAS_", "CUDNN_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_",
                 "BLIS_", "NUMEXPR_", "PYTORCH_", "TORCH_")
_ENV_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")


def allowed_environment(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """The allow-listed part of ``environ``: locale, PATH, and what torch, CUDA and the math libraries read."""
    kept = {}
    for name, value in environ.items():
        if name not in _ENV_NAMES and not name.startswith(_ENV_PREFIXES):
            continue
        if any(word in name.upper() for word in _ENV_SECRET_WORDS):
            continue
        kept[name] = value
    return kept


# --- mounts ----------------------------------------------------------------------------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_KEEP = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": 1024,
         "nodiratime": 2048, "relatime": 1 << 21, "strictatime": 1 << 24}
_DEVICES = ("null", "zero", "full", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    done = _libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                       data and data.encode())
    if done != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount {target}: {os.strerror(number)}")


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape")


def _mounts() -> list[tuple[str, list[str]]]:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [(_unescape(line.split()[4]), line.split()[5].split(",")) for line in f]


def _remount_read_only(point: str, options: list[str]) -> None:
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
    for option in options:
        flags |= _KEEP.get(option, 0)
    _mount(None, point, None, flags)


def make_read_only(writable: str | None = None, skip: tuple[str, ...] = ("/proc", "/dev")) -> dict:
    """In a fresh mount namespace: remount everything read-only except ``writable`` and ``skip``.

    Returns what was done: ``{"read_only_files": bool, "left_writable": [...]}``."""
    try:
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # our changes must never reach the host
        if writable:
            _mount(writable, writable, None, _MS_BIND | _MS_REC)
    except OSError:
        return {"read_only_files": False, "left_writable": ["/"]}
    left = []
    for point, options in _mounts():
        if point == writable or any(point == p or point.startswith(p + "/") for p in skip):
            continue
        if "ro" in options:
            continue
        try:
            _remount_read_only(point, options)
        except OSError:
            left.append(point)
    root_ro = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
    return {"read_only_files": root_ro and "/" not in left, "left_writable": left}


def _fresh_proc() -> None:
    """The PID namespace's own /proc, read-only: the user's code sees only its own processes."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY)


def _minimal_dev() -> None:
    """A read-only tmpfs on /dev with only harmless devices: as uid 0 (root mapped to root), no caps are
    needed to open a disk whose node is root's, so the real /dev must not be visible."""
    names = [n for n in _DEVICES if os.path.exists(f"/dev/{n}")]
    try:
        names += sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    except OSError:
        pass
    handles = {n: os.open(f"/dev/{n}", os.O_PATH) for n in names}
    try:
        _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=755,size=1m")
        for name, fd in handles.items():
            open(f"/dev/{name}", "w").close()
            _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, _MS_BIND)
        for folder in ("shm", "pts"):
            os.mkdir(f"/dev/{folder}", 0o1777)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
            os.symlink(target, f"/dev/{name}")
        _mount(None, "/dev", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC)
    finally:
        for fd in handles.values():
            os.close(fd)


def setup_worker_mounts(writable: str | None = None) -> dict:
    """In the worker's new mount (and PID) namespace: everything read-only but ``writable`` (the worker's
    own folder, used only when a child cannot have a private /tmp), our own /proc, a minimal /dev."""
    layers: dict = {}
    done = make_read_only(writable, skip=("/proc", "/dev"))
    layers["read_only_files"] = done["read_only_files"]
    if done["left_writable"]:
        layers["left_writable"] = done["left_writable"]
    try:
        _minimal_dev()
        layers["minimal_dev"] = True
    except OSError as exc:
        layers["minimal_dev"] = False
        layers["minimal_dev_note"] = str(exc)
    for folder in ("/run", "/var/run"):  # daemons' Unix sockets (docker, dbus...): a path connect needs no write
        if os.path.isdir(folder) and not os.path.islink(folder):
            try:
                _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, "size=4k")
            except OSError as exc:
                layers["masked_run_note"] = str(exc)
    if os.getpid() == 1:
        try:
            _fresh_proc()
            layers["private_proc"] = True
        except OSError as exc:
            layers["private_proc"] = False
            layers["private_proc_note"] = str(exc)
    return layers


def is_read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# --- child side: its own /tmp and /dev/shm ---------------------------------------------------------------

RUN_DIR = "/tmp/gradguard-run"  # the child's working folder, inside its private /tmp


def private_tmp(keep: list[str], size_mb: int, hide: str | None = None) -> str:
    """In a new mount namespace: a fresh tmpfs on /tmp and on /dev/shm (gone when the child's tree is gone).

    ``keep``: folders under /tmp the script needs (its own folder); bound back read-only.  ``hide``: the
    worker's own writable folder, made read-only here when it is not under /tmp (TMPDIR elsewhere).
    Returns the working folder (in the new /tmp)."""
    if _libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        number = ctypes.get_errno()
        raise OSError(number, f"unshare(CLONE_NEWNS): {os.strerror(number)}")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    under_tmp = sorted({os.path.realpath(k) for k in keep if os.path.realpath(k).startswith("/tmp/")})
    handles = {k: os.open(k, os.O_PATH | os.O_DIRECTORY) for k in under_tmp if os.path.isdir(k)}
    try:
        size = f"size={max(16, size_mb)}m"
        _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,{size}")
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,{size}")
        for folder, fd in handles.items():
            os.makedirs(folder, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", folder, None, _MS_BIND | _MS_REC)
            _mount(None, folder, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    finally:
        for fd in handles.values():
            os.close(fd)
    if hide and os.path.isdir(hide) and not os.path.realpath(hide).startswith("/tmp/"):
        _mount(None, hide, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.makedirs(RUN_DIR, 0o700, exist_ok=True)
    return RUN_DIR


def close_other_fds(keep: set[int]) -> None:
    """Close every descriptor but 0-2 and ``keep``: the worker's protocol pipes must not reach the user's code."""
    try:
        open_fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, 4096))
    for fd in open_fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def reduce_environment(workdir: str) -> None:
    """The allow-list only, and every cache and temp folder a library might write to in ``workdir``."""
    kept = allowed_environment(os.environ)
    os.environ.clear()
    os.environ.update(kept)
    for name in ("HOME", "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCH_HOME",
                 "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "HF_HOME"):
        os.environ[name] = workdir
    import tempfile

    tempfile.tempdir = None


private_environment = reduce_environment  # the old name


# --- child side: limits ----------------------------------------------------------------------------------

# Tasks (threads count) of the sandbox's user in its user namespace, the worker's included; a fork bomb
# stops there.  torch starts a thread per core in each process that computes, so it grows with the cores.
MAX_PROCESSES = max(1024, 32 * (os.cpu_count() or 1))


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


def limit_processes(count: int = MAX_PROCESSES) -> bool:
    """RLIMIT_NPROC, and no core files.  The kernel enforces NPROC only in a user namespace (or for a
    non-root user): root in the initial namespace is exempt; the caller reports which."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (count, count))
    except (ValueError, OSError):
        return False
    return True


# --- child side: capabilities, no_new_privs, seccomp -------------------------------------------------

_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 24, 28, 38, 47
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets, and lock root out of them
    (securebits), so neither a remount nor an exec of anything gives a capability back."""
    for cap in range(_last_cap() + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    _libc.prctl(_PR_SET_SECUREBITS, 0x2F, 0, 0, 0)  # NOROOT, NO_SETUID_FIXUP, and their locks
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # two empty {effective, permitted, inheritable}
    if _libc.capset(ctypes.c_char_p(header), data) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"capset: {os.strerror(number)}")


def no_new_privs() -> None:
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"PR_SET_NO_NEW_PRIVS: {os.strerror(number)}")


# Syscalls the user's code never gets.  Numbers per architecture (x86_64, aarch64).
_DENIED = {
    "mount": (165, 40), "umount2": (166, 39), "setns": (308, 268), "unshare": (272, 97), "ptrace": (101, 117),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "pivot_root": (155, 41), "chroot": (161, 51), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "userfaultfd": (323, 282), "perf_event_open": (298, 241), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),  # io_uring makes sockets without socket(2)
}
_SOCKET, _CLONE, _CLONE3 = (41, 198), (56, 220), (435, 435)
_ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
_CLONE_NEW_ANY = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000


def _seccomp_program() -> bytes:
    column, arch = _ARCHES[platform.machine()]

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    deny = op(RET, _RET_ERRNO | errno.EPERM)
    prog = [op(LD, 4), op(JEQ, arch, 1, 0), op(RET, _RET_ERRNO | errno.ENOSYS), op(LD, 0)]
    if column == 0:  # x32 system calls: the same kernel entry with another numbering
        prog += [op(JGE, 0x40000000, 0, 1), deny]
    for numbers in _DENIED.values():
        prog += [op(JEQ, numbers[column], 0, 1), deny]
    prog += [op(JEQ, _CLONE3[column], 0, 1), op(RET, _RET_ERRNO | errno.ENOSYS)]  # libc falls back to clone
    prog += [op(JEQ, _SOCKET[column], 0, 4), op(LD, 16), op(JEQ, socket.AF_UNIX, 0, 1), op(RET, _RET_ALLOW),
             op(RET, _RET_ERRNO | errno.EAFNOSUPPORT)]
    prog += [op(JEQ, _CLONE[column], 0, 3), op(LD, 16), op(JSET, _CLONE_NEW_ANY, 0, 1), deny]
    prog += [op(RET, _RET_ALLOW)]
    return b"".join(prog)


def install_seccomp() -> None:
    """Deny mount, umount2, setns, unshare, ptrace, keyctl, bpf, pivot_root, chroot, io_uring, the new mount
    API, clone with a namespace flag, and socket() of any family but AF_UNIX.  On every thread (TSYNC)."""
    if platform.machine() not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {platform.machine()}")
    program = _seccomp_program()
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    syscall_nr = {"x86_64": 317, "aarch64": 277}[platform.machine()]
    _libc.syscall.restype = ctypes.c_long
    if _libc.syscall(ctypes.c_long(syscall_nr), ctypes.c_ulong(1), ctypes.c_ulong(1),
                     ctypes.byref(fprog)) == 0:  # SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC
        return
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")


def kernel_view(pid: int | str = "self") -> dict:
    """What the kernel says about a process: capabilities, no_new_privs, seccomp mode."""
    seen: dict = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
                    seen[name] = value.strip()
    except OSError:
        pass
    return seen


def locked_down(view: dict) -> dict:
    """The layers ``view`` (``kernel_view``) proves."""
    return {"capabilities_dropped": bool(view) and all(int(view.get(k, "1"), 16) == 0
                                                         for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")),
            "no_new_privs": view.get("NoNewPrivs") == "1", "seccomp": view.get("Seccomp") == "2"}


# --- child side: the audit guard ------------------------------------------------------------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NET_FAMILIES = {socket.AF_INET, socket.AF_INET6}
_PATH_EVENTS = {  # audit event -> (index of a path it writes, index of that path's dir_fd or None)
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.rename": ((0, 2), (1, 3)),
    "os.link": ((1, 3),), "os.symlink": ((1, 2),), "os.truncate": ((0, None),), "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.chflags": ((0, None),), "os.mkfifo": ((0, 2),),
    "os.mknod": ((0, 3),), "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
    "shutil.move": ((0, None), (1, None)), "shutil.rmtree": ((0, 2),), "shutil.make_archive": ((0, None),),
}
_NET_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
_DNS_EVENTS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex",
               "socket.getnameinfo"}
# Without namespaces a started program is out of the hook's reach, and so is what sqlite writes in C.
_PROGRAM_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "pty.spawn"}
_WATCHED = frozenset({"open", "socket.__new__", "sqlite3.connect"} | set(_PATH_EVENTS) | _NET_EVENTS | _DNS_EVENTS
                     | _PROGRAM_EVENTS)


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
    """The audit hook.  ``blocked`` lists what it refused, for the result.

    ``strict`` (no namespaces under it): also refuse starting programs, sqlite databases outside the
    writable folders, and writes through a ``dir_fd``; ``os.open`` is wrapped because its audit event
    does not carry the ``dir_fd``."""

    def __init__(self, writable: list[str], strict: bool = False, read_only: list[str] = ()):
        self.writable = tuple(os.path.join(os.path.realpath(w), "") for w in writable)
        self.read_only = tuple(os.path.join(os.path.realpath(r), "") for r in read_only)
        self.exact = {os.devnull}
        self.blocked: list[str] = []
        self.strict = strict
        self.looked_up: tuple | None = None

    def _resolve(self, path, dir_fd=None) -> str | None:
        if isinstance(path, int):
            return None  # an already open descriptor
        try:
            path = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        if isinstance(dir_fd, int) and not os.path.isabs(path):
            try:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:
                return "/"  # an unknown folder: refuse
        return os.path.realpath(path)

    def _allowed(self, path, dir_fd=None) -> bool:
        real = self._resolve(path, dir_fd)
        if real is None:
            return True
        if self.read_only and (real + "/").startswith(self.read_only):
            return False  # the project, bound read-only into a writable private /tmp
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
        elif event == "socket.__new__":
            if len(args) > 1 and args[1] in _NET_FAMILIES:
                to = f" for {self.looked_up!r}" if self.looked_up else ""
                self._refuse(f"network access (a {socket.AddressFamily(args[1]).name} socket{to})")
        elif event in _NET_EVENTS:
            sock = args[0] if args else None
            if getattr(sock, "family", None) in _NET_FAMILIES:
                address = args[1] if len(args) > 1 else ""
                self._refuse(f"network access ({event.split('.')[1]} to {address})")
        elif event in _DNS_EVENTS:
            host = args[0] if args else None
            if event == "socket.getaddrinfo":
                self.looked_up = tuple(args[:2])  # create_connection looks the address up, then makes a socket
            if not _local_name(host):  # numeric addresses resolve without the network; connect decides
                self._refuse(f"network access (name lookup of {host})")
        elif event in _PROGRAM_EVENTS:
            if self.strict:
                self._refuse(f"starting a program ({event}) without namespaces")
        elif event == "sqlite3.connect":
            database = args[0] if args else None
            if self.strict and isinstance(database, (str, bytes, os.PathLike)):
                name = os.fsdecode(database)
                if name not in ("", ":memory:") and not name.startswith("file::memory:") \
                        and not self._allowed(name.removeprefix("file:").split("?")[0]):
                    self._refuse(f"sqlite3 database {name}")
        else:
            for index, fd_index in _PATH_EVENTS[event]:
                if index < len(args) and args[index] is not None:
                    dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
                    if not self._allowed(args[index], dir_fd):
                        self._refuse(f"{event} on {os.fsdecode(args[index])}")

    def wrap_open(self) -> None:
        """``os.open(path, flags, dir_fd=fd)``: its audit event has no dir_fd; check it here."""
        import posix

        real_open = posix.open
        guard = self

        def open(path, flags, mode=0o777, *, dir_fd=None):  # noqa: A001 - the name os.open has
            if dir_fd is not None and flags & _WRITE_FLAGS and not guard._allowed(path, dir_fd):
                guard._refuse(f"writing {os.fsdecode(path)} (dir_fd)")
            return real_open(path, flags, mode, dir_fd=dir_fd)

        os.open = posix.open = open


def install_guard(writable: list[str], strict: bool = False, read_only: list[str] = ()) -> Guard:
    guard = Guard(writable, strict, read_only)
    if strict:
        guard.wrap_open()
    sys.addaudithook(guard)
    return guard
