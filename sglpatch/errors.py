"""The one error type for expected failures: caught once in the CLI, printed as one line."""


class UserError(Exception):
    """A failure caused by input or environment, with what is wrong and what to do.

    The message is shown to the user as a single line on stderr; no traceback.
    """

    def __init__(self, what: str, hint: str | None = None):
        self.what = what
        self.hint = hint
        super().__init__(f"{what}: {hint}" if hint else what)
