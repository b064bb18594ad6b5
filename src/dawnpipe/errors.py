"""The one exception type that reaches the user as a message, not a traceback."""


class DawnpipeError(Exception):
    """Bad input or a failed precondition. The message must name the file,
    field or row and the reason; the CLI prints it and exits non-zero."""


class UsageError(DawnpipeError):
    """Wrong command-line usage (exit code 2, like argparse)."""


def missing_package(error: ModuleNotFoundError) -> str | None:
    """The message for a third-party package that is not installed (None when
    the missing module is dawnpipe's own: that is a bug, not an install)."""
    name = (error.name or "").split(".")[0]
    if not name or name == "dawnpipe":
        return None
    return (
        f"the Python package providing {name!r} is not installed in this environment; "
        "`make setup` installs every package dawnpipe uses (or: pip install -r requirements.txt -c constraints.txt)"
    )
