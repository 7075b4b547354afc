// distribute-train's progress output: a redrawn progress bar on a terminal,
// one plain line per epoch otherwise (a log file, a pipe, CI).
//
//   Progress progress(std::cout, is_terminal(stdout), epochs, steps_per_epoch,
//                     {.columns = terminal_columns(stdout)});
//   for each epoch:
//     for each step: ... progress.step(epoch, step, steps, loss, acc, samples_per_second);
//     progress.end_epoch({.epoch = epoch, .epochs = epochs, .loss = ..., ...});
//
// On a terminal, step() redraws one line in place with '\r':
//   epoch 3/20 [=========>          ] 12/23  loss 0.1234  acc 0.9612  215000 samples/s
// at most once per redraw interval (and always on an epoch's first and last
// step), and end_epoch() replaces it with the epoch's summary line. Otherwise
// step() prints nothing and end_epoch() prints the summary line only:
//   epoch 1/20  loss 0.4123  accuracy 0.8812  test_accuracy 0.9305  215000 samples/s  0.007 s
//
// A Progress is not thread-safe: one thread (the chief's training loop) calls it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <iosfwd>
#include <string>

namespace distribute::train {

// True when `stream` is a terminal (isatty) and TERM is not "dumb": where
// '\r' redraws and the ANSI "clear to end of line" work.
bool is_terminal(std::FILE* stream);

// The terminal's width in columns (TIOCGWINSZ), else $COLUMNS, else 80.
int terminal_columns(std::FILE* stream);

// One epoch's results, as the summary line shows them.
struct EpochLine {
  int epoch = 0;   // 1-based
  int epochs = 0;  // in total
  double loss = 0;
  double accuracy = 0;
  double test_accuracy = 0;
  double samples_per_second = 0;
  double seconds = 0;
};

// "epoch 1/20  loss 0.4123  accuracy 0.8812  test_accuracy 0.9305  215000 samples/s  0.007 s"
// (no newline).
std::string format_epoch_line(const EpochLine& line);

struct ProgressOptions {
  // The terminal's width: the bar shrinks (down to 10 cells) so that the
  // line fits in columns - 1, and a line still too long is cut there, so a
  // redraw never wraps onto a second line. Interactive mode only.
  int columns = 80;
  // Minimum time between two redraws of the bar.
  double redraw_interval_seconds = 0.1;
  // Monotonic time in seconds; empty: std::chrono::steady_clock. Tests
  // inject their own.
  std::function<double()> clock = {};
};

class Progress {
 public:
  // steps_per_epoch: the steps of a whole epoch, or -1 when unknown (then
  // step()'s steps_in_epoch says it, or the bar is left out). Raises
  // InvalidArgumentError for epochs < 1, steps_per_epoch 0 or < -1,
  // columns < 20 or a negative redraw interval.
  Progress(std::ostream& out, bool interactive, int epochs, std::int64_t steps_per_epoch,
           ProgressOptions options = {});
  // Ends an unfinished bar line with a newline, so that what is printed
  // next (an error message) starts on a line of its own.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // After step `step` (1-based) of `steps_in_epoch` (-1: the constructor's
  // steps_per_epoch) of epoch `epoch` (1-based): the running loss, accuracy
  // and throughput of the epoch so far. Redraws the bar when interactive and
  // due. Raises InvalidArgumentError for an epoch outside 1..epochs, a step
  // < 1 or past steps_in_epoch.
  void step(int epoch, std::int64_t step, std::int64_t steps_in_epoch, double loss, double accuracy,
            double samples_per_second);

  // After each epoch: prints format_epoch_line(line) and a newline, over the
  // bar when interactive. Raises InvalidArgumentError when line.epochs is
  // not the constructor's epochs or line.epoch is outside 1..epochs.
  void end_epoch(const EpochLine& line);

  bool interactive() const { return interactive_; }

 private:
  std::string bar_line(int epoch, std::int64_t step, std::int64_t steps, double loss, double accuracy,
                       double samples_per_second) const;

  std::ostream& out_;
  bool interactive_;
  int epochs_;
  std::int64_t steps_per_epoch_;
  ProgressOptions options_;
  bool bar_shown_ = false;  // a bar line without its newline is on screen
  int bar_epoch_ = 0;       // the epoch the last redraw showed
  double last_draw_ = 0;
};

}  // namespace distribute::train
