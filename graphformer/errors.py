"""The errors users see: one line that names the problem and what to do about it."""


class UserError(ValueError):
    """Bad input or a bad state of files that the user can fix; the CLI prints it without a traceback."""


class ConfigError(UserError):
    """A config field with a bad value, reported in the library's own terms (``lr_factor must be
    above 0``); the command line names its flag instead (``--lr-factor must be above 0``)."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name, self.problem = name, problem
