// How messages name things, and how a message is cut to fit a report.
#include "core/describe.h"

#include <gtest/gtest.h>

#include <string>

namespace distribute::internal {
namespace {

TEST(Utf8Prefix, CutsBeforeACharacterItWouldSplit) {
  const std::string text = "ab\xc3\xa9" "cd";  // "abécd": é is 2 bytes (c3 a9)
  EXPECT_EQ(utf8_prefix(text, 100), text);
  EXPECT_EQ(utf8_prefix(text, 4), "ab\xc3\xa9");
  EXPECT_EQ(utf8_prefix(text, 3), "ab");  // not "ab\xc3"
  EXPECT_EQ(utf8_prefix(text, 2), "ab");
  const std::string euro = "\xe2\x82\xac\xe2\x82\xac";  // "€€": 3 bytes each
  for (std::size_t n = 3; n < 6; ++n) EXPECT_EQ(utf8_prefix(euro, n), "\xe2\x82\xac") << n;
  EXPECT_EQ(utf8_prefix(euro, 2), "");
  EXPECT_EQ(utf8_prefix("", 0), "");
}

TEST(ListIds, NamesReplicasOrWorkers) {
  EXPECT_EQ(list_ids({}), "[]");
  EXPECT_EQ(list_ids({0, 2}), "[0, 2]");
}

}  // namespace
}  // namespace distribute::internal
