"""Errors every command shell raises and ``cli.main`` turns into one line and exit 2.

Their own module, below ``cli`` and ``probe.cli``, so that a subcommand can raise them without importing the
command line that dispatches to it.
"""


class UsageError(Exception):
    """Something the user asked for cannot be done; exits 2 with the message."""


class ConfigError(ValueError):
    """The configuration is malformed; the message says where and how (``config``, which raises it, imports the
    analysis: the command line catches it without importing that)."""
