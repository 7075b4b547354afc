// Tests of the error hierarchy: every class is a distribute::Error and a
// std::exception with TF's canonical code, and set_replica_id prefixes what().
#include "distribute/errors.h"
#include "testing/helpers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

namespace distribute {
namespace {

using ::testing::HasSubstr;

// The expected code, its numeric value (tensorflow/core/protobuf/error_codes.proto)
// and TF's spelling of it, per error class.
template <class E>
struct Expected;

#define DISTRIBUTE_EXPECTED_ERROR(Class, Code, Value, Name) \
  template <>                                               \
  struct Expected<Class> {                                  \
    static constexpr ErrorCode kCode = ErrorCode::Code;     \
    static constexpr int kValue = Value;                    \
    static constexpr std::string_view kName = Name;         \
  }

DISTRIBUTE_EXPECTED_ERROR(CancelledError, kCancelled, 1, "CANCELLED");
DISTRIBUTE_EXPECTED_ERROR(UnknownError, kUnknown, 2, "UNKNOWN");
DISTRIBUTE_EXPECTED_ERROR(InvalidArgumentError, kInvalidArgument, 3, "INVALID_ARGUMENT");
DISTRIBUTE_EXPECTED_ERROR(DeadlineExceededError, kDeadlineExceeded, 4, "DEADLINE_EXCEEDED");
DISTRIBUTE_EXPECTED_ERROR(NotFoundError, kNotFound, 5, "NOT_FOUND");
DISTRIBUTE_EXPECTED_ERROR(AlreadyExistsError, kAlreadyExists, 6, "ALREADY_EXISTS");
DISTRIBUTE_EXPECTED_ERROR(FailedPreconditionError, kFailedPrecondition, 9, "FAILED_PRECONDITION");
DISTRIBUTE_EXPECTED_ERROR(AbortedError, kAborted, 10, "ABORTED");
DISTRIBUTE_EXPECTED_ERROR(OutOfRangeError, kOutOfRange, 11, "OUT_OF_RANGE");
DISTRIBUTE_EXPECTED_ERROR(UnimplementedError, kUnimplemented, 12, "UNIMPLEMENTED");
DISTRIBUTE_EXPECTED_ERROR(InternalError, kInternal, 13, "INTERNAL");
DISTRIBUTE_EXPECTED_ERROR(UnavailableError, kUnavailable, 14, "UNAVAILABLE");
DISTRIBUTE_EXPECTED_ERROR(DataLossError, kDataLoss, 15, "DATA_LOSS");

#undef DISTRIBUTE_EXPECTED_ERROR

template <class E>
class ErrorClassTest : public ::testing::Test {};

using AllErrors = ::testing::Types<CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
                                   NotFoundError, AlreadyExistsError, FailedPreconditionError, AbortedError,
                                   OutOfRangeError, UnimplementedError, InternalError, UnavailableError,
                                   DataLossError>;
TYPED_TEST_SUITE(ErrorClassTest, AllErrors);

TYPED_TEST(ErrorClassTest, DerivesFromErrorAndStdException) {
  static_assert(std::is_base_of_v<Error, TypeParam>);
  static_assert(std::is_base_of_v<std::exception, TypeParam>);
  static_assert(std::is_convertible_v<TypeParam*, Error*>, "public base");
  static_assert(std::is_convertible_v<TypeParam*, std::exception*>, "public base");
  // The message constructor is explicit: a string is not silently an error.
  static_assert(std::is_constructible_v<TypeParam, std::string>);
  static_assert(!std::is_convertible_v<std::string, TypeParam>);

  EXPECT_THROW(throw TypeParam("boom"), TypeParam);
  EXPECT_THROW(throw TypeParam("boom"), Error);
  EXPECT_THROW(throw TypeParam("boom"), std::exception);
}

TYPED_TEST(ErrorClassTest, CodeAndName) {
  using Want = Expected<TypeParam>;
  const TypeParam e("boom");
  EXPECT_EQ(e.code(), Want::kCode);
  EXPECT_EQ(static_cast<int>(e.code()), Want::kValue);
  EXPECT_EQ(error_code_name(e.code()), Want::kName);
  EXPECT_EQ(error_code_name(Want::kCode), Want::kName);
}

TYPED_TEST(ErrorClassTest, MessageAndWhatWithoutReplica) {
  const TypeParam e("something went wrong");
  EXPECT_EQ(e.message(), "something went wrong");
  EXPECT_STREQ(e.what(), "something went wrong");
  EXPECT_FALSE(e.replica_id().has_value());
}

TYPED_TEST(ErrorClassTest, CaughtAsBaseKeepsCodeAndMessage) {
  try {
    throw TypeParam("caught as base");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Expected<TypeParam>::kCode);
    EXPECT_EQ(e.message(), "caught as base");
    EXPECT_STREQ(e.what(), "caught as base");
  }
  try {
    throw TypeParam("caught as std::exception");
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "caught as std::exception");
    EXPECT_NE(dynamic_cast<const TypeParam*>(&e), nullptr);
  }
}

TYPED_TEST(ErrorClassTest, SetReplicaIdPrefixesWhat) {
  TypeParam e("bad value");
  e.set_replica_id(3);
  ASSERT_TRUE(e.replica_id().has_value());
  EXPECT_EQ(*e.replica_id(), 3);
  EXPECT_STREQ(e.what(), "replica 3: bad value");
  EXPECT_EQ(e.message(), "bad value");
  EXPECT_EQ(e.code(), Expected<TypeParam>::kCode);
}

TYPED_TEST(ErrorClassTest, ThrowErrorRaisesTheClassItsCodeNames) {
  try {
    throw_error(Expected<TypeParam>::kCode, "from a peer");
  } catch (const TypeParam& e) {
    EXPECT_EQ(typeid(e), typeid(TypeParam));
    EXPECT_EQ(e.code(), Expected<TypeParam>::kCode);
    EXPECT_STREQ(e.what(), "from a peer");
    return;
  } catch (const std::exception& e) {
    FAIL() << "got " << typeid(e).name() << ": " << e.what();
  }
}

TEST(ThrowError, ACodeOutOfRangeIsUnknown) {
  for (int code : {0, 7, 8, 16, -1}) {
    try {
      throw_error(static_cast<ErrorCode>(code), "odd code");
      FAIL() << "nothing thrown for " << code;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnknown) << code;
      EXPECT_STREQ(e.what(), "odd code");
    }
  }
}

TEST(ErrorCodeName, AllCodes) {
  EXPECT_EQ(error_code_name(ErrorCode::kCancelled), "CANCELLED");
  EXPECT_EQ(error_code_name(ErrorCode::kUnknown), "UNKNOWN");
  EXPECT_EQ(error_code_name(ErrorCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(error_code_name(ErrorCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
  EXPECT_EQ(error_code_name(ErrorCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(error_code_name(ErrorCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_EQ(error_code_name(ErrorCode::kFailedPrecondition), "FAILED_PRECONDITION");
  EXPECT_EQ(error_code_name(ErrorCode::kAborted), "ABORTED");
  EXPECT_EQ(error_code_name(ErrorCode::kOutOfRange), "OUT_OF_RANGE");
  EXPECT_EQ(error_code_name(ErrorCode::kUnimplemented), "UNIMPLEMENTED");
  EXPECT_EQ(error_code_name(ErrorCode::kInternal), "INTERNAL");
  EXPECT_EQ(error_code_name(ErrorCode::kUnavailable), "UNAVAILABLE");
  EXPECT_EQ(error_code_name(ErrorCode::kDataLoss), "DATA_LOSS");
}

TEST(ErrorBase, ConstructedDirectly) {
  const Error e(ErrorCode::kAborted, "direct");
  EXPECT_EQ(e.code(), ErrorCode::kAborted);
  EXPECT_EQ(e.message(), "direct");
  EXPECT_STREQ(e.what(), "direct");
  EXPECT_FALSE(e.replica_id().has_value());
}

TEST(ErrorReplicaId, ReplicaZero) {
  InvalidArgumentError e("x");
  e.set_replica_id(0);
  ASSERT_TRUE(e.replica_id().has_value());
  EXPECT_EQ(*e.replica_id(), 0);
  EXPECT_STREQ(e.what(), "replica 0: x");
}

TEST(ErrorReplicaId, SettingAgainReplacesThePrefix) {
  UnavailableError e("peer gone");
  e.set_replica_id(1);
  e.set_replica_id(12);
  EXPECT_EQ(*e.replica_id(), 12);
  EXPECT_STREQ(e.what(), "replica 12: peer gone");
  EXPECT_EQ(e.message(), "peer gone");
}

TEST(ErrorReplicaId, EmptyMessage) {
  InternalError e("");
  EXPECT_STREQ(e.what(), "");
  e.set_replica_id(2);
  EXPECT_STREQ(e.what(), "replica 2: ");
  EXPECT_EQ(e.message(), "");
}

TEST(ErrorReplicaId, CopyKeepsReplicaAndPrefix) {
  AbortedError e("retry");
  e.set_replica_id(5);
  const AbortedError copy = e;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.replica_id(), std::optional<int>(5));
  EXPECT_STREQ(copy.what(), "replica 5: retry");
  EXPECT_EQ(copy.message(), "retry");
  // The copy owns its text: changing the original leaves it alone.
  e.set_replica_id(6);
  EXPECT_STREQ(copy.what(), "replica 5: retry");
  EXPECT_STREQ(e.what(), "replica 6: retry");
}

TEST(ErrorReplicaId, SetThroughBaseReferenceAndRethrowKeepsType) {
  // What Strategy::run does: catch as Error&, attach the replica, rethrow.
  const std::string what = testing::message_of<FailedPreconditionError>([] {
    try {
      throw FailedPreconditionError("not in a replica context");
    } catch (Error& e) {
      e.set_replica_id(1);
      throw;
    }
  });
  EXPECT_EQ(what, "replica 1: not in a replica context");
  EXPECT_THAT(what, HasSubstr("not in a replica context"));
}

}  // namespace
}  // namespace distribute
