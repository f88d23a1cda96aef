"""The exceptions that mean "the user asked for something wrong", not "mirl has a bug".

The ``mirl`` command turns any :class:`UserError` (and the few standard exceptions listed in
:data:`USER_ERRORS`) into one line ``mirl <command>: <message>`` and exit status 2; ``mirl --debug`` shows the
traceback instead. Raise a subclass of :class:`UserError` wherever a bad input (a config value, a file, a run
directory, a device) is found, with a message that says what came, what was expected and the fix.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: a value, a file, a directory or an option. The message says the fix."""


class InputFileError(UserError, ValueError):
    """A file the user named is missing, unreadable or malformed; the message names the file and the line."""


class DeviceError(UserError, ValueError):
    """A device was asked for that this machine does not have (e.g. ``cuda`` without a GPU)."""


# What the command line reports as a user error: ours, plus what bad paths and bad values raise in the standard
# library and in the libraries mirl reads files and values with (OSError covers FileNotFoundError,
# IsADirectoryError, NotADirectoryError, PermissionError; ImportError carries an install hint).
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, OSError, ValueError, ImportError)
