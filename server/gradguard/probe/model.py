"""What a probe is asked to do and what it reports.  Plain data: no torch, no processes.

Both sides of the process boundary use these classes; they cross it as JSON
(``to_json`` / ``from_json``), so every field is a JSON-friendly value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# How a probe run ended.
COMPLETED = "completed"  # the script (or the entry function) ran to its end
EXITED = "exited"  # the script called sys.exit()
RAISED = "raised"  # an exception escaped the script (it may be a finding: see ProbeResult.exception)
TIMEOUT = "timeout"  # killed after the wall-clock timeout
MEMORY = "memory"  # ran out of memory under the address-space limit
CRASHED = "crashed"  # the process died (a signal, or it ended without a result)
FAILED = "failed"  # the probe could not run the target at all (unreadable, syntax error, no torch, no CUDA...)

STATUSES = (COMPLETED, EXITED, RAISED, TIMEOUT, MEMORY, CRASHED, FAILED)
# Statuses after which the probe's findings are still trustworthy but its coverage is partial.
INCOMPLETE = (TIMEOUT, MEMORY, CRASHED, FAILED)

DEVICES = ("cpu", "cuda", "auto")
DEFAULT_TIMEOUT_S = 60.0
# RLIMIT_AS of the probed process.  Measured here (2 CPUs, MALLOC_ARENA_MAX=2): the warm worker with
# torch and torch._dynamo imported maps 0.71 GB of address space; an MLP training step peaks at
# 0.85 GB (a small step still runs under an 800 MB limit).  Each extra core adds thread stacks.
# 6 GB leaves a script ~5 GB; tests/probe/test_probe_safety.py checks a step plus 1 GB of tensors.
DEFAULT_MEMORY_MB = 6144


@dataclass(frozen=True)
class ProbeOptions:
    """What to run and under which limits.

    ``entry``: import the file and call this function (``run``, or ``Class.method`` for a
    static/class method); None runs the file as ``__main__``.
    ``lines``: lines of the target whose execution should be reported back in
    ``ProbeResult.reached`` (``check --probe`` passes its static findings' lines).
    ``roots``: folders whose files count as the user's code (the stack is walked to the first frame
    in one of them); default: the target's folder (a module's package root).
    ``module``: run the file as ``python -m module`` from ``module_root`` (a file inside a package, so that
    its relative imports work); None runs it as a script.  ``argv``: the script's ``sys.argv[1:]``.
    """

    device: str = "cpu"
    timeout: float = DEFAULT_TIMEOUT_S
    memory_mb: int | None = DEFAULT_MEMORY_MB
    entry: str | None = None
    lines: tuple[int, ...] = ()
    roots: tuple[str, ...] = ()
    isolate: bool = True  # network namespace + read-only files when the kernel allows them
    trace: bool = True  # False runs the target untraced in the same sandbox (the benchmark's baseline)
    allow_missing_layers: bool = False  # run even where the kernel refuses a sandbox layer (reported)
    module: str | None = None
    module_root: str | None = None
    argv: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["lines"] = list(self.lines)
        data["roots"] = list(self.roots)
        data["argv"] = list(self.argv)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProbeOptions":
        data = dict(data)
        data["lines"] = tuple(data.get("lines", ()))
        data["roots"] = tuple(data.get("roots", ()))
        data["argv"] = tuple(str(a) for a in data.get("argv", ()))
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Site:
    """A place in the user's code: 1-based line and column (column 0 when unknown)."""

    path: str
    line: int
    column: int = 0
    end_line: int = 0
    end_column: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Site":
        return cls(**data)


@dataclass(frozen=True)
class Note:
    """A related location: where the tensor was saved, where backward ran, who called the helper."""

    site: Site
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"site": asdict(self.site), "message": self.message}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Note":
        return cls(Site.from_json(data["site"]), data["message"])


@dataclass(frozen=True)
class Saving:
    """One tensor autograd saved for backward, as torch saw it: where, by which aten op (``sigmoid``,
    ``addmm``), in which role (``output`` of that op, a ``weight`` -- an ``nn.Parameter`` or a view of one --
    or another ``input``) and, for an input, the autograd node that had made it (``grad_fn.name()`` when it was
    saved: ``AddmmBackward0``; None for a leaf).  Structured so that the static explanation can be compared
    with it (``tests/agreement.py``) without reading messages."""

    site: Site | None
    op: str | None
    role: str
    made_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"site": asdict(self.site) if self.site else None, "op": self.op, "role": self.role,
                "made_by": self.made_by}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Saving":
        site = Site.from_json(data["site"]) if data.get("site") else None
        return cls(site, data.get("op"), data["role"], data.get("made_by"))


@dataclass(frozen=True)
class ProbeFinding:
    """One grad-breaking mutation the probe observed.

    ``site`` is the innermost frame in the user's code (the line that mutates); ``callers`` are the
    user's frames that led there, innermost first (a static finding reported at a helper's call site
    matches one of them); ``origins`` are other lines it is about (where an ``inplace=True`` module
    was made, where a tensor was rebuilt from plain values).  ``kind``: ``raised`` (backward or the op raised), ``silent`` (a saved tensor
    was changed behind autograd's back and backward used it), ``pending`` (a saved tensor was changed
    and its graph was still alive when the run ended, but no backward used it), ``graph-break``, ``starved``
    (a ``.detach()``/``.data`` -- GG103 -- or a copy of a parameter made under no_grad -- GG109 -- whose result fed a
    backward that gave trained parameters upstream of it no gradient).
    ``saves``: the saved tensors the write hit, the one backward used first (the one torch's message is
    about); ``backward``: the ``backward()`` that raised or used it; ``view_node``: for a write to an output of
    a function that returns several views, the autograd node torch names (``Split``, ``Unbind``, or the
    ``Select``/``View`` taken of such an output).
    """

    code: str
    kind: str
    site: Site
    message: str
    severity: str = "error"
    torch_message: str | None = None
    notes: tuple[Note, ...] = ()
    callers: tuple[Site, ...] = ()
    origins: tuple[Site, ...] = ()
    op: str | None = None
    count: int = 1
    saves: tuple[Saving, ...] = ()
    backward: Site | None = None
    view_node: str | None = None

    @property
    def lines(self) -> set[tuple[str, int]]:
        """Every (path, line) of the user's code that this finding is about: the mutation, the calls
        that led to it, and its origins (the ``inplace=True`` module's constructor, the line that
        rebuilt a tensor from plain values)."""
        return {(s.path, s.line) for s in (self.site, *self.callers, *self.origins)}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = [n.to_json() for n in self.notes]
        data["callers"] = [asdict(c) for c in self.callers]
        data["origins"] = [asdict(c) for c in self.origins]
        data["saves"] = [s.to_json() for s in self.saves]
        data["backward"] = asdict(self.backward) if self.backward else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProbeFinding":
        data = dict(data)
        data["site"] = Site.from_json(data["site"])
        data["notes"] = tuple(Note.from_json(n) for n in data.get("notes", ()))
        data["callers"] = tuple(Site.from_json(c) for c in data.get("callers", ()))
        data["origins"] = tuple(Site.from_json(c) for c in data.get("origins", ()))
        data["saves"] = tuple(Saving.from_json(s) for s in data.get("saves", ()))
        data["backward"] = Site.from_json(data["backward"]) if data.get("backward") else None
        return cls(**data)


@dataclass
class ProbeResult:
    """Everything one probe run says.  ``detail`` is one human sentence about how the run ended."""

    path: str
    status: str
    detail: str = ""
    device: str = "cpu"
    findings: list[ProbeFinding] = field(default_factory=list)
    reached: list[int] = field(default_factory=list)  # which of ProbeOptions.lines ran
    exit_code: int | None = None  # the argument of sys.exit(), when the script called it
    exception: dict[str, Any] | None = None  # {"type", "message", "line", "finding": bool}
    blocked: list[str] = field(default_factory=list)  # writes/connections the guard refused
    sandbox: dict[str, Any] = field(default_factory=dict)  # which protections were in force
    stdout: str = ""  # the tail of what the script printed
    stderr: str = ""
    seconds: float = 0.0  # wall time of the script under the tracer (0 when it did not start)
    cpu_seconds: float = 0.0  # CPU time of the probed process (all threads) over the same span
    ops: int = 0  # tensor operations the tracer saw (0 after a run that only defined functions and classes)
    total_seconds: float = 0.0  # wall time of the whole request, as the caller saw it

    @property
    def complete(self) -> bool:
        return self.status not in INCOMPLETE

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [f.to_json() for f in self.findings]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProbeResult":
        data = dict(data)
        data["findings"] = [ProbeFinding.from_json(f) for f in data.get("findings", ())]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


# What ``check --probe`` says about each file it was asked to check (``FileOutcome.outcome``).
RAN = "ran"  # ran to its end (or called sys.exit(0))
STOPPED_BY_FINDING = "stopped-by-finding"  # stopped at line N by the autograd error its findings explain
STOPPED = "stopped"  # stopped at line N by an error that is not an autograd one: the probe could not confirm
TIMED_OUT = "timed-out"
DID_NOT_RUN = "did-not-run"  # the probe could not run it (crashed, out of memory, failed to start)
NO_ENTRY = "no-entry"  # not run: a module with only definitions
NOT_RUN = "not-run"  # not run: a notebook, source from stdin, a file that is not valid Python
OUTCOMES = (RAN, STOPPED_BY_FINDING, STOPPED, TIMED_OUT, DID_NOT_RUN, NO_ENTRY, NOT_RUN)
# Outcomes after which "All checks passed." may still be said (with the findings deciding).
PASSING = (RAN, STOPPED_BY_FINDING, NO_ENTRY)


@dataclass(frozen=True)
class FileOutcome:
    """One file's line in ``check --probe``'s report: how it was run (``how``: ``python a.py``,
    ``python -m pkg.mod``), how that ended, at which ``line`` when it stopped, and why (``detail``)."""

    path: str
    outcome: str
    detail: str
    how: str | None = None
    line: int | None = None
    status: str | None = None  # the ProbeResult's status, when it ran
    seconds: float = 0.0

    @property
    def passes(self) -> bool:
        return self.outcome in PASSING

    @property
    def text(self) -> str:
        """One phrase: ``ran to the end``, ``stopped at line 7 by ValueError: ...``, ``not run: no entry point``."""
        return self.detail

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "outcome": self.outcome, "detail": self.detail, "how": self.how,
                "line": self.line, "status": self.status, "seconds": round(self.seconds, 3),
                "complete": self.passes}


def resolve_device(requested: str, cuda_available: bool) -> str:
    """``cpu`` and ``cuda`` as asked; ``auto`` is ``cuda`` when a GPU is there.  Raises ValueError
    for an unknown name and for ``cuda`` without a GPU (the caller reports it as FAILED)."""
    if requested not in DEVICES:
        raise ValueError(f"unknown device {requested!r} (expected one of {', '.join(DEVICES)})")
    if requested == "auto":
        return "cuda" if cuda_available else "cpu"
    if requested == "cuda" and not cuda_available:
        raise ValueError("--device cuda was asked for, but torch.cuda.is_available() is False here")
    return requested
