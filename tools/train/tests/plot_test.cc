// The learning-curve PNG: a real PNG of the requested size whose pixels
// depend on the data, written whole or not at all.
#include "plot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "distribute/errors.h"

namespace distribute::train {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("distribute-plot-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str(const std::string& child) const { return (path_ / child).string(); }
  // The names of the directory's entries.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(path_)) names.push_back(entry.path().filename().string());
    return names;
  }

 private:
  fs::path path_;
};

std::vector<CurvePoint> curve(int epochs, double speed = 1) {
  std::vector<CurvePoint> points;
  for (int e = 1; e <= epochs; ++e) {
    points.push_back({.epoch = e,
                      .loss = 2.3 * std::exp(-0.35 * speed * e) + 0.02,
                      .accuracy = 1 - 0.9 * std::exp(-0.4 * speed * e),
                      .test_accuracy = 0.98 - 0.85 * std::exp(-0.38 * speed * e)});
  }
  return points;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t big_endian(const std::string& bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes.at(at + i));
  return v;
}

// Checks the signature and the IHDR chunk (the first one): width, height.
void expect_png(const std::string& bytes, std::uint32_t width, std::uint32_t height) {
  ASSERT_GE(bytes.size(), 33u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(big_endian(bytes, 8), 13u) << "IHDR length";
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian(bytes, 16), width);
  EXPECT_EQ(big_endian(bytes, 20), height);
}

TEST(PlotTest, WritesAPngOfTheRequestedSize) {
  TempDir dir;
  const std::string path = dir.str("curve.png");
  write_learning_curve_png(path, curve(20), {.width = 800, .height = 600});
  const std::string bytes = read(path);
  expect_png(bytes, 800, 600);
  // Text, lines and markers: far more than a blank image's few hundred bytes.
  EXPECT_GT(bytes.size(), 10000u);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"curve.png"}) << "no temporary file left";

  write_learning_curve_png(path, curve(20));  // the default size, over the old file
  expect_png(read(path), 960, 720);
}

TEST(PlotTest, TheImageDependsOnTheData) {
  TempDir dir;
  write_learning_curve_png(dir.str("a.png"), curve(10, 1.0));
  write_learning_curve_png(dir.str("b.png"), curve(10, 1.0));
  write_learning_curve_png(dir.str("c.png"), curve(10, 0.5));
  EXPECT_EQ(read(dir.str("a.png")), read(dir.str("b.png"))) << "deterministic";
  EXPECT_NE(read(dir.str("a.png")), read(dir.str("c.png")));
}

TEST(PlotTest, OnePointAndNonFiniteValuesStillPlot) {
  TempDir dir;
  write_learning_curve_png(dir.str("one.png"), curve(1));
  expect_png(read(dir.str("one.png")), 960, 720);
  std::vector<CurvePoint> points = curve(5);
  points[2].loss = std::nan("");
  points[3].loss = INFINITY;
  write_learning_curve_png(dir.str("nan.png"), points);
  expect_png(read(dir.str("nan.png")), 960, 720);
  // A resumed run's curve starts past epoch 1.
  points = curve(12);
  points.erase(points.begin(), points.begin() + 7);
  write_learning_curve_png(dir.str("resumed.png"), points);
  expect_png(read(dir.str("resumed.png")), 960, 720);
}

TEST(PlotTest, AMissingDirectoryRaisesAndLeavesNothing) {
  TempDir dir;
  EXPECT_THROW(write_learning_curve_png(dir.str("missing/curve.png"), curve(3)), FailedPreconditionError);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(PlotTest, ADirectoryInTheWayRaisesAndLeavesNoTemporaryFile) {
  TempDir dir;
  fs::create_directory(dir.str("curve.png"));
  try {
    write_learning_curve_png(dir.str("curve.png"), curve(3));
    FAIL() << "expected FailedPreconditionError";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("curve.png"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"curve.png"});
  EXPECT_TRUE(fs::is_directory(dir.str("curve.png")));
}

TEST(PlotTest, RejectsBadInput) {
  TempDir dir;
  const std::string path = dir.str("curve.png");
  EXPECT_THROW(write_learning_curve_png(path, {}), InvalidArgumentError);
  EXPECT_THROW(write_learning_curve_png("", curve(3)), InvalidArgumentError);
  std::vector<CurvePoint> repeated = curve(3);
  repeated[2].epoch = 2;
  EXPECT_THROW(write_learning_curve_png(path, repeated), InvalidArgumentError);
  EXPECT_THROW(write_learning_curve_png(path, curve(3), {.width = 100}), InvalidArgumentError);
  EXPECT_THROW(write_learning_curve_png(path, curve(3), {.height = 100000}), InvalidArgumentError);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(PlotTest, ConcurrentCallsEachWriteTheirPlot) {
  TempDir dir;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&dir, &errors, i] {
      try {
        write_learning_curve_png(dir.str("curve" + std::to_string(i) + ".png"), curve(5 + i),
                                 {.width = 400 + 10 * i, .height = 300});
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors, std::vector<std::string>(4));
  for (int i = 0; i < 4; ++i) {
    expect_png(read(dir.str("curve" + std::to_string(i) + ".png")), static_cast<std::uint32_t>(400 + 10 * i), 300);
  }
}

}  // namespace
}  // namespace distribute::train
