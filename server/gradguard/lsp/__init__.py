"""gradguard's language server (pygls 2, stdio).  Entry point: ``gradguard.lsp.main.main``."""
