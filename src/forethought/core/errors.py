"""User-facing errors: the CLI prints their message on one line and exits non-zero, without a traceback."""


class ForethoughtError(Exception):
    """Bad input or state a user can fix (config key, dataset name, corrupt checkpoint, ...)."""


def first_line(error: BaseException) -> str:
    """The first line of an exception's message, without a trailing period, for one-line user errors."""
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else type(error).__name__
