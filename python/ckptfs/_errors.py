# SPDX-License-Identifier: MIT
"""The one exception class of the package."""


class Error(Exception):
    """ckptfs.Error -- what went wrong, in one line.

    DESCRIPTION
        Every failure of the package is an Error (or a subclass): a checkpoint the ckptfs
        program refuses, a mount that does not come up, a read that fails, a key that is not
        there, a tensor torch cannot hold. Its text is one line in the ckptfs program's form,
        "ckptfs: FILE: what is wrong: what to do"; when the program itself failed, it is the
        line the program printed.

    ATTRIBUTES
        message  the line, as str(error) gives it
        status   the ckptfs program's exit status when it failed (1 usage, 2 a file missing or
                 unreadable, 3 an invalid zip, 4 an invalid checkpoint, 5 valid but not served,
                 6 the mount failed, 7 access refused by a server, 8 a server did not answer:
                 docs/USAGE.md), else None
        errno    the errno of a failed read or open (errno.EIO: the checkpoint changed, or a
                 server failed), else None
    """

    def __init__(self, message, status=None, errno=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.errno = errno

    def __str__(self):
        return self.message


class KeyNotFound(Error, KeyError):
    """ckptfs.KeyNotFound -- a key the checkpoint (or the selection) does not have.

    DESCRIPTION
        Both an Error and a KeyError, so that a checkpoint is a Mapping like any other
        (``key in ck``, ``ck.get(key)``) and ``except ckptfs.Error`` still catches it.
    """

    def __str__(self):  # KeyError's own would quote the line
        return self.message
