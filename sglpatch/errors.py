"""The one error type for expected failures: caught once in the CLI, printed as one line."""


class UserError(Exception):
    """A failure caused by input or environment, with what is wrong and what to do.

    The message is shown to the user as a single line on stderr; no traceback. Both parts are
    required: an error that does not say what to do is a bug in this tool, refused where it is made.
    """

    # Set by a step that leaves what it did before failing in place (the patches a push applied
    # before the one that did not apply stay applied, as quilt does): the transaction keeps them.
    keep_progress: bool = False

    def __init__(self, what: str, hint: str):
        if not (isinstance(what, str) and what and isinstance(hint, str) and hint):
            raise TypeError(f"UserError needs what is wrong and what to do, got {what!r}, {hint!r}")
        self.what = what
        self.hint = hint
        super().__init__(f"{what}: {hint}")
