"""The one exception type for user mistakes: the CLI prints its message and exits non-zero."""


class TokenroofError(Exception):
    """A problem with the user's input (a file, a name, a flag), described in one line."""
