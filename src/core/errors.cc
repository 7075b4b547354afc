#include "distribute/errors.h"

#include <utility>

namespace distribute {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kCancelled: return "CANCELLED";
    case ErrorCode::kUnknown: return "UNKNOWN";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kAlreadyExists: return "ALREADY_EXISTS";
    case ErrorCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kOutOfRange: return "OUT_OF_RANGE";
    case ErrorCode::kUnimplemented: return "UNIMPLEMENTED";
    case ErrorCode::kInternal: return "INTERNAL";
    case ErrorCode::kUnavailable: return "UNAVAILABLE";
    case ErrorCode::kDataLoss: return "DATA_LOSS";
  }
  return "UNKNOWN";
}

Error::Error(ErrorCode code, std::string message)
    : code_(code), message_(std::move(message)), what_(message_) {}

void Error::set_replica_id(int replica_id) {
  replica_id_ = replica_id;
  what_ = "replica " + std::to_string(replica_id) + ": " + message_;
}

void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kCancelled:
      throw CancelledError(message);
    case ErrorCode::kInvalidArgument:
      throw InvalidArgumentError(message);
    case ErrorCode::kDeadlineExceeded:
      throw DeadlineExceededError(message);
    case ErrorCode::kNotFound:
      throw NotFoundError(message);
    case ErrorCode::kAlreadyExists:
      throw AlreadyExistsError(message);
    case ErrorCode::kFailedPrecondition:
      throw FailedPreconditionError(message);
    case ErrorCode::kAborted:
      throw AbortedError(message);
    case ErrorCode::kOutOfRange:
      throw OutOfRangeError(message);
    case ErrorCode::kUnimplemented:
      throw UnimplementedError(message);
    case ErrorCode::kInternal:
      throw InternalError(message);
    case ErrorCode::kUnavailable:
      throw UnavailableError(message);
    case ErrorCode::kDataLoss:
      throw DataLossError(message);
    case ErrorCode::kUnknown:
      break;
  }
  throw UnknownError(message);
}

}  // namespace distribute
