"""The one exception type for mistakes a user can make (bad config, unknown name, bad data)."""


class AtnatError(Exception):
    """A user-facing error: the message names what is wrong, where, and what was expected.

    The CLI prints it without a traceback; everything else is a bug and keeps its traceback.
    """
