"""One error root for mnemoflow.

Every error the core raises derives from :class:`MnemoflowError`, so a caller can catch all of them in one
place. Each class's docstring says what the operator should do about it.
"""

from __future__ import annotations


class MnemoflowError(Exception):
    """Root of every mnemoflow error."""


class InvalidInput(MnemoflowError, ValueError):
    """The caller sent something we refuse (bad id, malformed message array). Fix the request; nothing was written."""


class NotFound(MnemoflowError, LookupError):
    """The user, atom or operation named does not exist (for this tenant). Check the id; nothing was written."""


class Conflict(MnemoflowError):
    """The request contradicts what is stored (an operation id reused with another body, an edit of a replaced
    atom). Use a new operation id, or act on the current version; nothing was written."""


class ConfigError(MnemoflowError):
    """The configuration is inconsistent or names something that is not there. Fix the settings and restart."""


class StorageError(MnemoflowError):
    """A file or index could not be read or written. Check disk space and permissions; the work will be retried."""


class ServiceUnavailable(MnemoflowError):
    """A runtime part (broker, Ray, Serve, model) did not answer in time. Check that it runs; retry the call."""


class StructuredOutputError(MnemoflowError):
    """The model twice returned output that does not validate against the requested output model.

    ``raw_text`` holds the last raw reply. The call was retried once with the validation error; check the
    model, the prompt, ``max_tokens`` (a reply cut off at the limit is invalid JSON) and the engine's
    schema enforcement. The failure is counted in the engine's usage recorder.
    """

    def __init__(self, message: str, *, raw_text: str, stage: str = "default") -> None:
        super().__init__(message)
        self.raw_text = raw_text
        self.stage = stage

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields: rebuild through a helper so the error survives pickling (Ray, Serve replicas).
        return (_structured_output_error, (str(self), self.raw_text, self.stage))


def _structured_output_error(message: str, raw_text: str, stage: str) -> StructuredOutputError:
    return StructuredOutputError(message, raw_text=raw_text, stage=stage)
