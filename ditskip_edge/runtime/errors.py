"""User-facing errors: the CLI prints them as one line and exits non-zero, without a traceback."""


class UserError(Exception):
    """A mistake in the user's input (a path, a flag, a file's content). The message names what was expected."""


class BundleError(UserError):
    """A bundle (or a file in it) does not match its manifest, or was made for something else."""
