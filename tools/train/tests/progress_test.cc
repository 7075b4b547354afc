// distribute-train's progress output: one plain line per epoch off a
// terminal; on one, a bar redrawn in place at most every redraw interval and
// replaced by the epoch's line.
#include "progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "distribute/errors.h"

namespace distribute::train {
namespace {

EpochLine epoch_line(int epoch, int epochs) {
  return {.epoch = epoch,
          .epochs = epochs,
          .loss = 0.5 / epoch,
          .accuracy = 0.8,
          .test_accuracy = 0.9,
          .samples_per_second = 215000.4,
          .seconds = 0.0071};
}

// A clock the test moves by hand.
struct FakeClock {
  double now = 100;
  int calls = 0;
  std::function<double()> fn() {
    return [this] {
      ++calls;
      return now;
    };
  }
};

// The texts drawn with '\r' (up to the erase-to-end-of-line that follows each).
std::vector<std::string> redraws(const std::string& out) {
  std::vector<std::string> got;
  for (std::size_t at = out.find('\r'); at != std::string::npos; at = out.find('\r', at + 1)) {
    const std::size_t end = out.find("\033[K", at);
    if (end == at + 1) continue;  // the erase before an epoch's line
    got.push_back(out.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1));
  }
  return got;
}

TEST(ProgressTest, EpochLineHasTheTrainersFormat) {
  EXPECT_EQ(format_epoch_line(epoch_line(1, 20)),
            "epoch 1/20  loss 0.5000  accuracy 0.8000  test_accuracy 0.9000  215000 samples/s  0.007 s");
}

TEST(ProgressTest, NonInteractivePrintsExactlyOneLinePerEpoch) {
  std::ostringstream out;
  FakeClock clock;
  {
    Progress progress(out, false, 2, 3, {.clock = clock.fn()});
    for (int epoch = 1; epoch <= 2; ++epoch) {
      const std::string before = out.str();
      for (int step = 1; step <= 3; ++step) progress.step(epoch, step, 3, 0.4, 0.7, 1000);
      EXPECT_EQ(out.str(), before) << "no step output off a terminal";
      progress.end_epoch(epoch_line(epoch, 2));
    }
  }
  EXPECT_EQ(out.str(),
            "epoch 1/2  loss 0.5000  accuracy 0.8000  test_accuracy 0.9000  215000 samples/s  0.007 s\n"
            "epoch 2/2  loss 0.2500  accuracy 0.8000  test_accuracy 0.9000  215000 samples/s  0.007 s\n");
  EXPECT_EQ(clock.calls, 0);
}

TEST(ProgressTest, InteractiveRedrawsABarAndEndsTheEpochWithItsLine) {
  std::ostringstream out;
  FakeClock clock;
  Progress progress(out, true, 20, 4, {.columns = 200, .clock = clock.fn()});
  for (int step = 1; step <= 4; ++step) {
    progress.step(3, step, 4, 0.1234, 0.9612, 215000);
    clock.now += 1;
  }
  progress.end_epoch(epoch_line(3, 20));

  const std::string text = out.str();
  const std::vector<std::string> drawn = redraws(text);
  ASSERT_EQ(drawn.size(), 4u) << text;
  // A 30-cell bar: 1/4 done is 7 cells and the arrow head.
  EXPECT_EQ(drawn[0], "epoch 3/20 [=======>                      ] 1/4  loss 0.1234  acc 0.9612  215000 samples/s");
  EXPECT_EQ(drawn[3], "epoch 3/20 [==============================] 4/4  loss 0.1234  acc 0.9612  215000 samples/s");
  const std::string summary = "\r\033[K" + format_epoch_line(epoch_line(3, 20)) + "\n";
  ASSERT_GE(text.size(), summary.size());
  EXPECT_EQ(text.substr(text.size() - summary.size()), summary);
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line: the bar is redrawn in place";
}

TEST(ProgressTest, RedrawsAtMostOncePerIntervalAndAlwaysAtTheLastStep) {
  std::ostringstream out;
  FakeClock clock;
  Progress progress(out, true, 1, 10, {.columns = 120, .redraw_interval_seconds = 0.125, .clock = clock.fn()});
  for (int step = 1; step <= 10; ++step) {
    progress.step(1, step, -1, 0.5, 0.5, 100);
    clock.now += 0.0625;  // exact in binary: every second step is due, and step 10 as the last
  }
  std::vector<std::string> counts;
  for (const std::string& line : redraws(out.str())) {
    const std::size_t slash = line.find("/10 ");
    ASSERT_NE(slash, std::string::npos) << line;
    counts.push_back(line.substr(slash - 2, 5));
  }
  EXPECT_EQ(counts, (std::vector<std::string>{" 1/10", " 3/10", " 5/10", " 7/10", " 9/10", "10/10"}));
}

TEST(ProgressTest, AStoppedClockStillDrawsTheFirstAndLastStepOfEachEpoch) {
  std::ostringstream out;
  FakeClock clock;  // never moves
  Progress progress(out, true, 2, 50, {.clock = clock.fn()});
  for (int epoch = 1; epoch <= 2; ++epoch) {
    for (int step = 1; step <= 50; ++step) progress.step(epoch, step, 50, 1, 0, 1);
    progress.end_epoch(epoch_line(epoch, 2));
  }
  const std::vector<std::string> drawn = redraws(out.str());
  ASSERT_EQ(drawn.size(), 4u) << out.str();
  EXPECT_NE(drawn[0].find("epoch 1/2 ["), std::string::npos) << drawn[0];
  EXPECT_NE(drawn[1].find("50/50"), std::string::npos) << drawn[1];
  EXPECT_NE(drawn[2].find("epoch 2/2 ["), std::string::npos) << drawn[2];
  EXPECT_NE(drawn[2].find(" 1/50"), std::string::npos) << drawn[2];
}

TEST(ProgressTest, TheBarFitsTheTerminalWidth) {
  for (int columns : {40, 80, 100}) {
    std::ostringstream out;
    FakeClock clock;
    Progress progress(out, true, 20, 1000, {.columns = columns, .clock = clock.fn()});
    progress.step(20, 999, 1000, 12.3456, 0.5, 12345678);
    progress.step(20, 1000, 1000, 12.3456, 0.5, 12345678);
    const std::vector<std::string> drawn = redraws(out.str());
    ASSERT_EQ(drawn.size(), 2u);
    for (const std::string& line : drawn) {
      EXPECT_LE(line.size(), static_cast<std::size_t>(columns - 1)) << line;
      EXPECT_EQ(line.rfind("epoch 20/20 [", 0), 0u) << line;
    }
  }
}

TEST(ProgressTest, UnknownStepCountShowsTheStepWithoutABar) {
  std::ostringstream out;
  FakeClock clock;
  Progress progress(out, true, 1, -1, {.clock = clock.fn()});
  progress.step(1, 5, -1, 0.25, 0.75, 10);
  const std::vector<std::string> drawn = redraws(out.str());
  ASSERT_EQ(drawn.size(), 1u);
  EXPECT_EQ(drawn[0], "epoch 1/1 step 5  loss 0.2500  acc 0.7500  10 samples/s");
}

TEST(ProgressTest, DestructionEndsAnUnfinishedBarLine) {
  std::ostringstream out;
  FakeClock clock;
  {
    Progress progress(out, true, 1, 10, {.clock = clock.fn()});
    progress.step(1, 3, 10, 0.25, 0.75, 10);
  }
  ASSERT_FALSE(out.str().empty());
  EXPECT_EQ(out.str().back(), '\n');
}

TEST(ProgressTest, RejectsBadArguments) {
  std::ostringstream out;
  EXPECT_THROW(Progress(out, false, 0, 10), InvalidArgumentError);
  EXPECT_THROW(Progress(out, false, 1, 0), InvalidArgumentError);
  EXPECT_THROW(Progress(out, false, 1, -2), InvalidArgumentError);
  EXPECT_THROW(Progress(out, true, 1, 10, {.columns = 5}), InvalidArgumentError);
  EXPECT_THROW(Progress(out, true, 1, 10, {.redraw_interval_seconds = -1}), InvalidArgumentError);
  Progress progress(out, false, 3, 10);
  EXPECT_THROW(progress.step(4, 1, 10, 0, 0, 0), InvalidArgumentError);
  EXPECT_THROW(progress.step(1, 11, 10, 0, 0, 0), InvalidArgumentError);
  EXPECT_THROW(progress.step(1, 0, 10, 0, 0, 0), InvalidArgumentError);
  EXPECT_THROW(progress.end_epoch(epoch_line(1, 4)), InvalidArgumentError);
  try {
    progress.end_epoch(epoch_line(5, 3));
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("got 5"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(out.str().empty());
}

// Sets an environment variable for the test's duration.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ProgressTest, IsTerminalIsTrueForATtyUnlessTermIsDumb) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  EXPECT_FALSE(is_terminal(file));
  std::fclose(file);
  EXPECT_FALSE(is_terminal(nullptr));

  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  std::FILE* tty = std::fopen(::ptsname(master), "w");
  ASSERT_NE(tty, nullptr);
  {
    ScopedEnv term("TERM", "xterm-256color");
    EXPECT_TRUE(is_terminal(tty));
  }
  {
    ScopedEnv term("TERM", "dumb");
    EXPECT_FALSE(is_terminal(tty));
  }
  std::fclose(tty);
  ::close(master);
}

TEST(ProgressTest, TerminalColumnsFallsBackToColumnsThen80) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    ScopedEnv columns("COLUMNS", "132");
    EXPECT_EQ(terminal_columns(file), 132);
  }
  {
    ScopedEnv columns("COLUMNS", "wide");
    EXPECT_EQ(terminal_columns(file), 80);
  }
  std::fclose(file);
}

}  // namespace
}  // namespace distribute::train
