"""User-facing errors: the CLI prints their message on one line and exits non-zero, without a traceback."""


class ForethoughtError(Exception):
    """Bad input or state a user can fix (config key, dataset name, corrupt checkpoint, ...)."""
