"""The one exception type that reaches the user as a message, not a traceback."""


class DawnpipeError(Exception):
    """Bad input or a failed precondition. The message must name the file,
    field or row and the reason; the CLI prints it and exits non-zero."""


class UsageError(DawnpipeError):
    """Wrong command-line usage (exit code 2, like argparse)."""
