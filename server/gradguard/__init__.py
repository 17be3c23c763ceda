"""gradguard: find PyTorch code that breaks autograd through mutation.

Layers, each depending only on the ones above it:

    knowledge   what torch saves for backward, which ops are in-place/views (generated from torch)
    parsing     bytes -> text -> ``ast`` module, with a cheap prefilter
    statements  where statements nest in an ``ast`` tree (every walker of blocks asks it)
    inference   tensor dataflow over one function: which names are tensors, leaves, views, saved
    rules       one file per rule: turns dataflow events into findings
    api         the single analysis entry point used by the CLI and the language server
    cli / lsp   thin shells over ``api``
"""

__version__ = "0.1.0"

# `gradguard.watch()` (and its exception and warning) import torch: loaded on first use (PEP 562), so that
# `import gradguard` and all static analysis never need torch.
_LAZY = {"watch": "watching", "HiddenWriteError": "watching", "GradGuardWarning": "watching"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gradguard' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
