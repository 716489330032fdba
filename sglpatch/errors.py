"""The one error type for expected failures: caught once in the CLI, printed as one line."""


class UserError(Exception):
    """A failure caused by input or environment, with what is wrong and what to do.

    The message is shown to the user as a single line on stderr; no traceback. Both parts are
    required: an error that does not say what to do is a bug in this tool, refused where it is made.
    """

    def __init__(self, what: str, hint: str):
        if not (isinstance(what, str) and what and isinstance(hint, str) and hint):
            raise TypeError(f"UserError needs what is wrong and what to do, got {what!r}, {hint!r}")
        self.what = what
        self.hint = hint
        super().__init__(f"{what}: {hint}")
