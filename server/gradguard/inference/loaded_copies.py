"""A module just loaded with another's weights, replaced by that other module itself (rule GG101, silent).

``target.load_state_dict(online.state_dict())`` copies the weights of a trained module into another one (a target
network, a teacher, a frozen snapshot): the copy stays fixed while the optimizer updates the original.  Storing the
original where the copy was held (``self.target = self.online``) before the copy ran drops the copy unused, and
every optimizer step now changes what is read through that name, silently.

Claimed only when every link is known (the interpreter records them, see ``LoadedCopy``): the load, on a path known
to run, of a known module's ``state_dict()`` into another known module; the statement, on a path known to run, that
stores the source where the loaded module was held, with no forward of the loaded module after the load (then or
later: a copy that runs elsewhere was not dropped); and a later step of an optimizer that holds the source's
parameters.  The probe's finding of the same bug is ``probe/synced.py``.
"""

from __future__ import annotations

from .events import LoadedCopy


def replaced_copies(interp) -> list[LoadedCopy]:
    """The loads whose copy was replaced by its source before it ran, with the first step that then trains it."""
    found = []
    for load in interp.loads:
        if load.replaced is None or load.used:
            continue
        sources = interp.parameter_sources(load.source)
        load.step = next((s for s in interp.step_runs if s.seq > load.replaced_seq and s.sources & sources), None)
        if load.step is not None:
            found.append(load)
    return found
