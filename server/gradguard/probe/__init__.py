"""The runtime probe: run the user's code briefly under torch and report the mutations that break
autograd, with the mutation line, the line that saved the tensor and the backward that fails.

Only runs when asked (``gradguard probe``, ``gradguard check --probe``, or a call to
``probe_file``), in a sandboxed subprocess (see ``sandbox``).  Modules:

- ``model``: options and results (plain data, JSON round trip);
- ``runner``: the parent side (``ProbeWorker``, ``probe_file``); no torch;
- ``worker``: the warm worker process, one forked child per probe;
- ``sandbox``: the layers against hostile code (namespaces, read-only files, seccomp, no capabilities, a
  private /tmp, the environment allow-list, limits; docs/security.md) and the audit guard;
- ``tracer`` and ``target``: the child side (the tracer imports torch);
- ``merge``: probe results and static findings into one list of diagnostics;
- ``cli``: ``gradguard probe`` and ``check --probe``.
"""

from .model import ProbeFinding, ProbeOptions, ProbeResult, resolve_device
from .runner import ProbeWorker, WorkerError, probe_file

__all__ = ["ProbeFinding", "ProbeOptions", "ProbeResult", "ProbeWorker", "WorkerError", "probe_file",
           "resolve_device"]
