#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string_view>
#include <utility>

#include "distribute/errors.h"

namespace distribute::train {
namespace {

constexpr int kMinBar = 10;
constexpr int kMaxBar = 30;
// Carriage return, then the line, then ANSI "erase to end of line" so that a
// shorter line leaves nothing of the longer one before it.
constexpr std::string_view kEraseToEnd = "\033[K";

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool is_terminal(std::FILE* stream) {
  if (stream == nullptr) return false;
  const int fd = ::fileno(stream);
  if (fd < 0 || ::isatty(fd) == 0) return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::string_view(term) != "dumb";
}

int terminal_columns(std::FILE* stream) {
  if (stream != nullptr) {
    const int fd = ::fileno(stream);
    winsize size{};
    if (fd >= 0 && ::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  }
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long value = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && value > 0 && value < 10000) return static_cast<int>(value);
  }
  return 80;
}

std::string format_epoch_line(const EpochLine& line) {
  std::ostringstream text;
  text << std::fixed << "epoch " << line.epoch << "/" << line.epochs << "  loss " << std::setprecision(4) << line.loss
       << "  accuracy " << line.accuracy << "  test_accuracy " << line.test_accuracy << "  " << std::setprecision(0)
       << line.samples_per_second << " samples/s  " << std::setprecision(3) << line.seconds << " s";
  return text.str();
}

Progress::Progress(std::ostream& out, bool interactive, int epochs, std::int64_t steps_per_epoch,
                   ProgressOptions options)
    : out_(out),
      interactive_(interactive),
      epochs_(epochs),
      steps_per_epoch_(steps_per_epoch),
      options_(std::move(options)) {
  if (epochs < 1) throw InvalidArgumentError("Progress: epochs must be >= 1, got " + std::to_string(epochs));
  if (steps_per_epoch == 0 || steps_per_epoch < -1) {
    throw InvalidArgumentError("Progress: steps_per_epoch must be >= 1 or -1 (unknown), got " +
                               std::to_string(steps_per_epoch));
  }
  if (options_.columns < 20) {
    throw InvalidArgumentError("Progress: columns must be >= 20, got " + std::to_string(options_.columns));
  }
  if (!(options_.redraw_interval_seconds >= 0)) {
    throw InvalidArgumentError("Progress: redraw_interval_seconds must be >= 0, got " +
                               std::to_string(options_.redraw_interval_seconds));
  }
  if (!options_.clock) options_.clock = steady_seconds;
}

Progress::~Progress() {
  if (!bar_shown_) return;
  try {
    out_ << '\n' << std::flush;
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

void Progress::step(int epoch, std::int64_t step, std::int64_t steps_in_epoch, double loss, double accuracy,
                    double samples_per_second) {
  if (epoch < 1 || epoch > epochs_) {
    throw InvalidArgumentError("Progress::step: epoch must be in 1.." + std::to_string(epochs_) + ", got " +
                               std::to_string(epoch));
  }
  const std::int64_t steps = steps_in_epoch == -1 ? steps_per_epoch_ : steps_in_epoch;
  if (steps == 0 || steps < -1) {
    throw InvalidArgumentError("Progress::step: steps_in_epoch must be >= 1 or -1, got " +
                               std::to_string(steps_in_epoch));
  }
  if (step < 1 || (steps > 0 && step > steps)) {
    throw InvalidArgumentError("Progress::step: step must be in 1.." + (steps > 0 ? std::to_string(steps) : "") +
                               ", got " + std::to_string(step));
  }
  if (!interactive_) return;

  const double now = options_.clock();
  const bool due = !bar_shown_ || epoch != bar_epoch_ || step == steps ||
                   now - last_draw_ >= options_.redraw_interval_seconds;
  if (!due) return;
  out_ << '\r' << bar_line(epoch, step, steps, loss, accuracy, samples_per_second) << kEraseToEnd << std::flush;
  bar_shown_ = true;
  bar_epoch_ = epoch;
  last_draw_ = now;
}

void Progress::end_epoch(const EpochLine& line) {
  if (line.epochs != epochs_) {
    throw InvalidArgumentError("Progress::end_epoch: line.epochs must be the " + std::to_string(epochs_) +
                               " given at construction, got " + std::to_string(line.epochs));
  }
  if (line.epoch < 1 || line.epoch > epochs_) {
    throw InvalidArgumentError("Progress::end_epoch: epoch must be in 1.." + std::to_string(epochs_) + ", got " +
                               std::to_string(line.epoch));
  }
  if (bar_shown_) out_ << '\r' << kEraseToEnd;
  out_ << format_epoch_line(line) << '\n' << std::flush;
  bar_shown_ = false;
}

std::string Progress::bar_line(int epoch, std::int64_t step, std::int64_t steps, double loss, double accuracy,
                               double samples_per_second) const {
  std::ostringstream head;
  head << "epoch " << epoch << "/" << epochs_ << " ";
  std::ostringstream tail;
  tail << std::fixed << "  loss " << std::setprecision(4) << loss << "  acc " << accuracy << "  "
       << std::setprecision(0) << samples_per_second << " samples/s";

  std::string line = head.str();
  if (steps > 0) {
    const std::string total = std::to_string(steps);
    std::string count = std::to_string(step);
    count.insert(0, total.size() - std::min(total.size(), count.size()), ' ');  // no jitter as digits grow
    count += "/" + total;
    // "[" + bar + "] " + count: the bar takes what the line leaves, within limits.
    const auto fixed = static_cast<std::int64_t>(line.size() + 3 + count.size() + tail.str().size());
    const auto width = static_cast<std::int64_t>(std::clamp<std::int64_t>(options_.columns - 1 - fixed, kMinBar, kMaxBar));
    std::string bar(static_cast<std::size_t>(width), ' ');
    if (step >= steps) {
      bar.assign(static_cast<std::size_t>(width), '=');
    } else {
      const std::int64_t done = step * width / steps;  // < width
      std::fill_n(bar.begin(), done, '=');
      bar[static_cast<std::size_t>(done)] = '>';
    }
    line += "[" + bar + "] " + count;
  } else {
    line += "step " + std::to_string(step);
  }
  line += tail.str();
  const auto limit = static_cast<std::size_t>(options_.columns - 1);
  if (line.size() > limit) line.resize(limit);
  return line;
}

}  // namespace distribute::train
