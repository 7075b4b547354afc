// The library's error hierarchy, mirroring TF's canonical error codes.
//
// Every error the library raises is a subclass of distribute::Error, itself a
// std::exception. Which ones a program may recover from (see docs/errors.md):
//   - CancelledError, DeadlineExceededError, UnavailableError, AbortedError:
//     a peer failed or was too slow; the operation can be retried once the
//     cause is gone. An in-process strategy (Mirrored, OneDevice, default)
//     stays usable; a MultiWorkerMirroredStrategy whose cross-worker channel
//     broke does not (docs/errors.md).
//   - InvalidArgumentError, FailedPreconditionError, OutOfRangeError,
//     NotFoundError, AlreadyExistsError, UnimplementedError: the call itself is
//     wrong (or, for OutOfRangeError, input is exhausted); retrying the same
//     call gives the same error.
//   - InternalError, DataLossError, UnknownError: a broken invariant or
//     corrupted data; not meant to be handled.
//
// Messages say what was expected and what was got, and name the replica when
// one is involved. When a replica function throws a distribute::Error inside
// Strategy::run, run() attaches the replica's id (replica_id()) and what()
// starts with "replica N: ".
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace distribute {

// TF's canonical codes (same numeric values as tensorflow/core/protobuf/error_codes.proto).
enum class ErrorCode : int {
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
};

// "CANCELLED", "INVALID_ARGUMENT", ... as TF spells the codes.
std::string_view error_code_name(ErrorCode code);

// Base of every error the library raises.
class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message);

  ErrorCode code() const noexcept { return code_; }
  // The message without the replica prefix.
  const std::string& message() const noexcept { return message_; }
  // The replica whose function raised this error, when it was raised inside
  // Strategy::run (set by run before rethrowing).
  std::optional<int> replica_id() const noexcept { return replica_id_; }
  void set_replica_id(int replica_id);

  // "replica N: message" when replica_id() is set, else message().
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  ErrorCode code_;
  std::string message_;
  std::optional<int> replica_id_;
  std::string what_;
};

class CancelledError : public Error {
 public:
  explicit CancelledError(std::string message) : Error(ErrorCode::kCancelled, std::move(message)) {}
};
class UnknownError : public Error {
 public:
  explicit UnknownError(std::string message) : Error(ErrorCode::kUnknown, std::move(message)) {}
};
class InvalidArgumentError : public Error {
 public:
  explicit InvalidArgumentError(std::string message) : Error(ErrorCode::kInvalidArgument, std::move(message)) {}
};
class DeadlineExceededError : public Error {
 public:
  explicit DeadlineExceededError(std::string message) : Error(ErrorCode::kDeadlineExceeded, std::move(message)) {}
};
class NotFoundError : public Error {
 public:
  explicit NotFoundError(std::string message) : Error(ErrorCode::kNotFound, std::move(message)) {}
};
class AlreadyExistsError : public Error {
 public:
  explicit AlreadyExistsError(std::string message) : Error(ErrorCode::kAlreadyExists, std::move(message)) {}
};
class FailedPreconditionError : public Error {
 public:
  explicit FailedPreconditionError(std::string message) : Error(ErrorCode::kFailedPrecondition, std::move(message)) {}
};
class AbortedError : public Error {
 public:
  explicit AbortedError(std::string message) : Error(ErrorCode::kAborted, std::move(message)) {}
};
class OutOfRangeError : public Error {
 public:
  explicit OutOfRangeError(std::string message) : Error(ErrorCode::kOutOfRange, std::move(message)) {}
};
class UnimplementedError : public Error {
 public:
  explicit UnimplementedError(std::string message) : Error(ErrorCode::kUnimplemented, std::move(message)) {}
};
class InternalError : public Error {
 public:
  explicit InternalError(std::string message) : Error(ErrorCode::kInternal, std::move(message)) {}
};
class UnavailableError : public Error {
 public:
  explicit UnavailableError(std::string message) : Error(ErrorCode::kUnavailable, std::move(message)) {}
};
class DataLossError : public Error {
 public:
  explicit DataLossError(std::string message) : Error(ErrorCode::kDataLoss, std::move(message)) {}
};

// Throws the Error subclass that `code` names (UnknownError for kUnknown or
// a code out of range), with `message`: re-raises an error received as a
// code and a message (from another worker, a file, a binding), as TF's
// errors.exception_type_from_error_code does.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace distribute
