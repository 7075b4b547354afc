// PreemptionCheckpointHandler in one process: a termination notice (a
// watcher function, or a real SIGTERM) makes run() save a checkpoint at that
// call and call the exit function; a new handler (a stand-in for the rerun
// process) restores it and training continues to the uninterrupted result.
// The multi-worker agreement runs under mpirun: checkpoint_preemption_mpi
// (tests/checkpoint/run_preemption.sh).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::cpu_devices;
using testing::message_of;
using testing::TempDir;

// Thrown by the tests' exit function: the stack unwinds to the test.
struct Stopped {};

TerminationConfig watching(std::function<bool()> watcher) {
  TerminationConfig config;
  config.termination_watcher_fn = std::move(watcher);
  return config;
}

TerminationConfig exiting(std::function<void()> exit) {
  TerminationConfig config;
  config.exit_fn = std::move(exit);
  return config;
}

// A training stand-in: the natural input loop over 2 replicas, whose state
// is an iterator and a running total of the rows consumed (weighted by the
// step, so that a step skipped or repeated changes it).
struct Training {
  MirroredStrategy strategy{cpu_devices(2)};
  DistributedIterator it = strategy.experimental_distribute_dataset(pipeline()).make_iterator();
  std::int64_t total = 0;
  Checkpoint checkpoint{{.max_to_keep = 2}};

  static Dataset pipeline() {
    std::vector<std::int64_t> rows(60);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
    return Dataset::from_tensor_slices(Tensor(rows, Shape{60})).shuffle(30, /*seed=*/5).batch(8).repeat();
  }

  Training() {
    checkpoint.track("iterator", it);
    checkpoint.track("total", &total);
  }

  // One distributed step (what PreemptionCheckpointHandler::run calls).
  void step(std::int64_t number) {
    const PerReplica<Element> batch = it.get_next();
    PerReplica<Tensor> sums = strategy.run([](const Element& e) {
      std::int64_t s = 0;
      for (std::int64_t v : e[0].data<std::int64_t>()) s += v;
      return Tensor(s);
    }, batch);
    total += (number + 1) * strategy.reduce(ReduceOp::SUM, sums).data<std::int64_t>()[0];
  }
};

constexpr std::int64_t kSteps = 12;

std::int64_t uninterrupted_total() {
  Training run;
  for (std::int64_t s = 0; s < kSteps; ++s) run.step(s);
  return run.total;
}

// Runs to kSteps under a handler (resuming what `dir` holds); returns the
// total, or nullopt when the exit function ended the run.
std::optional<std::int64_t> run_under_handler(const std::string& dir, TerminationConfig config,
                                              std::int64_t* resumed_at = nullptr) {
  Training run;
  StrategyScope scope = run.strategy.scope();
  PreemptionCheckpointHandler handler(run.checkpoint, dir, std::move(config));
  if (resumed_at != nullptr) *resumed_at = handler.total_run_calls();
  try {
    for (std::int64_t s = handler.total_run_calls(); s < kSteps; ++s) handler.run([&] { run.step(s); });
  } catch (const Stopped&) {
    return std::nullopt;
  }
  return run.total;
}

TEST(PreemptionCheckpointHandlerTest, SavesAtTheNoticedCallAndTheRerunEndsAsAnUninterruptedRun) {
  const std::int64_t expected = uninterrupted_total();
  TempDir dir("preemption_test");
  int calls = 0, exits = 0;
  TerminationConfig config;
  config.termination_watcher_fn = [&] { return ++calls == 5; };  // told to stop during the 5th call
  config.exit_fn = [&] {
    ++exits;
    throw Stopped{};
  };
  EXPECT_EQ(run_under_handler(dir.path(), config), std::nullopt);
  EXPECT_EQ(exits, 1);
  const std::optional<std::string> latest = latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  std::optional<std::int64_t> saved_runs;
  for (const auto& [name, value] : load_checkpoint(*latest)) {
    if (name == "checkpointed_runs") saved_runs = value.data<std::int64_t>()[0];
  }
  EXPECT_EQ(saved_runs, 5);

  // The rerun: restored at construction, it continues from call 5.
  std::int64_t resumed_at = -1;
  EXPECT_EQ(run_under_handler(dir.path(), watching([] { return false; }), &resumed_at), expected);
  EXPECT_EQ(resumed_at, 5);
}

TEST(PreemptionCheckpointHandlerTest, ARealSigtermIsNoticedAfterTheStepAndForgottenWhenTheExitFunctionReturns) {
  TempDir dir("preemption_test");
  Training run;
  StrategyScope scope = run.strategy.scope();
  int exits = 0;
  PreemptionCheckpointHandler handler(run.checkpoint, dir.path(), exiting([&] { ++exits; }));
  EXPECT_EQ(handler.restored_from(), "");
  handler.run([&] { run.step(0); });
  EXPECT_EQ(latest_checkpoint(dir.path()), std::nullopt);
  // The signal arrives during a step: the process goes on, and the step
  // completes before the save.
  handler.run([&] {
    ASSERT_EQ(::raise(SIGTERM), 0);
    run.step(1);
  });
  EXPECT_EQ(exits, 1);
  const std::optional<std::string> latest = latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  std::optional<std::int64_t> saved_total;
  for (const auto& [name, value] : load_checkpoint(*latest)) {
    if (name == "total") saved_total = value.data<std::int64_t>()[0];
  }
  EXPECT_EQ(saved_total, run.total);
  // The exit function returned: training goes on, with no second save.
  handler.run([&] { run.step(2); });
  EXPECT_EQ(exits, 1);
  EXPECT_EQ(latest_checkpoint(dir.path()), latest);
  EXPECT_EQ(handler.total_run_calls(), 3);
}

extern "C" void previous_handler(int) {}

TEST(PreemptionCheckpointHandlerTest, OneHandlerWatchesSigtermAndThePreviousDispositionComesBack) {
  TempDir dir("preemption_test");
  struct sigaction mine {}, before {};
  mine.sa_handler = previous_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, &before), 0);
  {
    Checkpoint first_checkpoint, second_checkpoint;
    PreemptionCheckpointHandler first(first_checkpoint, dir / "a");
    EXPECT_THAT(message_of<FailedPreconditionError>([&] { PreemptionCheckpointHandler second(second_checkpoint, dir / "b"); }),
                HasSubstr("another handler already watches SIGTERM"));
    // The refused handler left nothing tracked.
    EXPECT_TRUE(second_checkpoint.tracked_names().empty());
    // A handler with its own watcher does not need the signal.
    PreemptionCheckpointHandler third(second_checkpoint, dir / "b", watching([] { return false; }));
    EXPECT_EQ(second_checkpoint.tracked_names(), std::vector<std::string>{"checkpointed_runs"});
    struct sigaction now {};
    ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
    EXPECT_NE(now.sa_handler, &previous_handler);
  }
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGTERM, &before, &after), 0);
  EXPECT_EQ(after.sa_handler, &previous_handler);
}

TEST(PreemptionCheckpointHandlerTest, BadUseRaisesNamingTheProblem) {
  TempDir dir("preemption_test");
  Checkpoint checkpoint;
  std::int64_t mine = 0;
  checkpoint.track("checkpointed_runs", &mine);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { PreemptionCheckpointHandler h(checkpoint, dir.path()); }),
              HasSubstr("already tracks \"checkpointed_runs\""));
  Checkpoint other;
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { PreemptionCheckpointHandler h(other, ""); }),
              HasSubstr("expected a checkpoint directory, got an empty name"));
  // A directory that cannot be created (a file is in the way).
  EXPECT_THAT(message_of<FailedPreconditionError>([&] {
                PreemptionCheckpointHandler h(other, "/proc/self/status/ckpt");
              }),
              HasSubstr("cannot create the checkpoint directory '/proc/self/status/ckpt'"));
  EXPECT_TRUE(other.tracked_names().empty());

  // Inside a replica function.
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  PreemptionCheckpointHandler handler(other, dir.path());
  EXPECT_THAT(message_of<FailedPreconditionError>([&] {
                strategy.run([&] { handler.save_checkpoint_if_preempted(); });
              }),
              HasSubstr("inside a replica function"));
}

TEST(PreemptionCheckpointHandlerDeathTest, TheDefaultExitIsStatus42AfterTheSave) {
  // "fast" (fork, no exec): the child writes into this test's directory.
  // No strategy threads exist here (the default strategy has none).
  GTEST_FLAG_SET(death_test_style, "fast");
  TempDir dir("preemption_test");
  EXPECT_EXIT(
      {
        Checkpoint checkpoint;
        std::int64_t value = 7;
        checkpoint.track("value", &value);
        PreemptionCheckpointHandler handler(checkpoint, dir.path());
        ::raise(SIGTERM);
        handler.run([] {});
        std::_Exit(0);  // not reached
      },
      ::testing::ExitedWithCode(42), "");
  const std::optional<std::string> latest = latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  const auto entries = load_checkpoint(*latest);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].first, "value");
  EXPECT_EQ(entries[0].second.data<std::int64_t>()[0], 7);
  EXPECT_EQ(entries[1].first, "checkpointed_runs");
  EXPECT_EQ(entries[1].second.data<std::int64_t>()[0], 1);
}

}  // namespace
}  // namespace distribute
