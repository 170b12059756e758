"""One error root for mnemoflow.

Every error the core raises derives from :class:`MnemoflowError`, so a caller can catch all of them in one
place. Each class's docstring says what the operator should do about it.
"""

from __future__ import annotations


class MnemoflowError(Exception):
    """Root of every mnemoflow error."""


class InvalidInput(MnemoflowError, ValueError):
    """The caller sent something we refuse (bad id, malformed message array). Fix the request; nothing was written."""


class ConfigError(MnemoflowError):
    """The configuration is inconsistent or names something that is not there. Fix the settings and restart."""


class StorageError(MnemoflowError):
    """A file or index could not be read or written. Check disk space and permissions; the work will be retried."""


class ServiceUnavailable(MnemoflowError):
    """A runtime part (broker, Ray, Serve, model) did not answer in time. Check that it runs; the call can be retried."""
