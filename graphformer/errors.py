"""The error users see: one line that names the problem and what to do about it."""


class UserError(ValueError):
    """Bad input or a bad state of files that the user can fix; the CLI prints it without a traceback."""
