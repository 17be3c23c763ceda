"""gradguard's language server (pygls 2, stdio).  Entry point: ``gradguard.lsp.main.main``.

Before any of its modules (and pygls) load, the code attrs and dataclasses generate for each class is taken
compiled from the cache of earlier starts (``generated_code.py``: ~100 ms of the start)."""

from .generated_code import install

install()
