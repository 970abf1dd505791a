"""User-facing errors: one clear line, a non-zero exit status, never a traceback."""


class UserError(Exception):
    """Bad input or environment. The CLI prints `llamalloc: error: <message>` and exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class FormatError(UserError):
    """A file that is truncated, corrupt, foreign or of another version. Always names the file."""

    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}", exit_code=2)
        self.path = str(path)
        self.problem = problem
