"""pytester runs the small projects in process and, after each run, drops the modules the run imported.  torch
imports some of its own modules on first use (an optimizer's step imports torch._dynamo) and a second import of
those registers their operators twice, which torch refuses: import them once here, before any inner run.  The
plugin's tracing half too, so that every run uses the same classes (and none pays for importing it)."""

try:
    import torch._dynamo  # noqa: F401

    import gradguard.pytest_tracing  # noqa: F401
except ImportError:  # no torch: the tests here skip
    pass
