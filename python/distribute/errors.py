"""The library's errors as Python exceptions, named as TF's ``tf.errors``.

Every error the C++ core raises arrives as one of these; all derive from
:class:`Error`. ``CancelledError``, ``DeadlineExceededError`` and
``UnavailableError`` come from waits on other replicas or workers;
``InvalidArgumentError`` and ``FailedPreconditionError`` are mistakes in the
call (the message names what was expected and what was got).
"""


class Error(Exception):
  """Base of every error of the distribute library (TF's OpError)."""


# TF's name for the base, so that ``except tf.errors.OpError`` works.
OpError = Error


class CancelledError(Error):
  pass


class UnknownError(Error):
  pass


class InvalidArgumentError(Error, ValueError):
  pass


class DeadlineExceededError(Error):
  pass


class NotFoundError(Error):
  pass


class AlreadyExistsError(Error):
  pass


class FailedPreconditionError(Error, RuntimeError):
  pass


class AbortedError(Error):
  pass


class OutOfRangeError(Error):
  pass


class UnimplementedError(Error, NotImplementedError):
  pass


class InternalError(Error):
  pass


class UnavailableError(Error):
  pass


class DataLossError(Error):
  pass


# The C++ error code names (distribute::error_code_name) and their classes.
BY_CODE = {
    "CANCELLED": CancelledError,
    "UNKNOWN": UnknownError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "NOT_FOUND": NotFoundError,
    "ALREADY_EXISTS": AlreadyExistsError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "ABORTED": AbortedError,
    "OUT_OF_RANGE": OutOfRangeError,
    "UNIMPLEMENTED": UnimplementedError,
    "INTERNAL": InternalError,
    "UNAVAILABLE": UnavailableError,
    "DATA_LOSS": DataLossError,
}

__all__ = ["Error"] + [cls.__name__ for cls in BY_CODE.values()]
