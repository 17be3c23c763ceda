"""jedi as the fallback oracle for names our own dataflow cannot settle.

Our dataflow sees only one file.  When a tensor that is later written in place
comes from a function imported from another module (``w = make_weight()``), we
ask jedi what that call returns.  jedi costs ~1-2 s cold and tens to hundreds of
milliseconds a query warm, so it is asked only for those names, lazily, once per
file, and never for anything torch's own namespace already tells us.
"""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path

log = logging.getLogger(__name__)

PARAMETER = ("torch.nn.parameter.Parameter", "torch.nn.Parameter")
TENSOR = ("torch._tensor.Tensor", "torch.Tensor")
MODULE_PREFIX = "torch.nn.modules."


def project_root(path: Path) -> Path:
    """The nearest folder with project markers; else the folder above the file's outermost package."""
    for folder in path.resolve().parents:
        if (folder / "pyproject.toml").exists() or (folder / ".git").exists() or (folder / "setup.py").exists():
            return folder
    folder = path.resolve().parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        folder = folder.parent
    return folder


class JediOracle:
    def __init__(self, source: str, path: str):
        self.source = source
        self.path = path
        self.queries = 0

    @cached_property
    def _script(self):
        import jedi  # imported lazily: most files never need it

        file = Path(self.path)
        if file.is_file():
            return jedi.Script(self.source, path=str(file), project=jedi.Project(str(project_root(file))))
        return jedi.Script(self.source)

    def type_of_name(self, line: int, column: int) -> str | None:
        """The full name of what the name at (1-based line, 0-based code-point column) is bound to, if jedi knows."""
        self.queries += 1
        try:
            for name in self._script.infer(line, column):
                if name.type == "instance" and name.full_name:
                    return name.full_name
        except Exception as exc:  # jedi can fail on odd code; precision first: no answer
            log.debug("jedi failed at %s:%s: %s", line, column, exc)
        return None
