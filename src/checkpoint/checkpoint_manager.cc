// CheckpointManager (include/distribute/checkpoint_manager.h): numbering,
// the interval, and which files to delete, over Checkpoint's commit.
#include "distribute/checkpoint_manager.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>

#include "checkpoint/checkpoint_files.h"
#include "distribute/errors.h"
#include "distribute/strategy.h"
#include "strategy/strategy_access.h"

namespace distribute {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A file's modification time in seconds since the epoch; nullopt when it
// cannot be read (the file is gone).
std::optional<double> saved_at(const std::string& path) {
  std::error_code ec;
  const fs::file_time_type t = fs::last_write_time(path, ec);
  if (ec) return std::nullopt;
  const auto sys = std::chrono::file_clock::to_sys(t);
  return std::chrono::duration<double>(sys.time_since_epoch()).count();
}

}  // namespace

CheckpointManager::CheckpointManager(Checkpoint& checkpoint, std::string directory, CheckpointManagerOptions options)
    : checkpoint_(&checkpoint),
      directory_(std::move(directory)),
      options_(std::move(options)),
      last_preserved_time_(now_seconds()) {
  const auto bad = [](const std::string& what) { throw InvalidArgumentError("CheckpointManager: " + what); };
  if (directory_.empty()) bad("expected a directory, got an empty string");
  if (options_.max_to_keep.has_value() && *options_.max_to_keep < 1) {
    bad("expected max_to_keep >= 1 (or std::nullopt to keep every checkpoint), got " +
        std::to_string(*options_.max_to_keep));
  }
  if (options_.keep_checkpoint_every_n_hours.has_value() && !(*options_.keep_checkpoint_every_n_hours > 0)) {
    bad("expected keep_checkpoint_every_n_hours > 0, got " + std::to_string(*options_.keep_checkpoint_every_n_hours));
  }
  if (options_.checkpoint_name.empty() || options_.checkpoint_name.find('/') != std::string::npos) {
    bad("expected a checkpoint_name without '/', got " + internal::quote_name(options_.checkpoint_name));
  }
  if (options_.checkpoint_interval.has_value()) {
    if (*options_.checkpoint_interval <= 0) {
      bad("expected checkpoint_interval > 0, got " + std::to_string(*options_.checkpoint_interval));
    }
    if (!options_.step_counter) bad("checkpoint_interval needs a step_counter to measure it");
  }
  // A directory this manager's files are already in (a restarted job):
  // with keep_checkpoint_every_n_hours, files beyond the newest
  // max_to_keep were kept for good, the newest of them last (without it,
  // such files are old ones the next save deletes).
  if (options_.max_to_keep.has_value() && options_.keep_checkpoint_every_n_hours.has_value()) {
    const std::vector<std::uint64_t> existing = numbers();
    const auto keep = static_cast<std::size_t>(*options_.max_to_keep);
    for (std::size_t i = 0; i + keep < existing.size(); ++i) {
      kept_for_good_.insert(existing[i]);
      if (std::optional<double> t = saved_at(path_of(existing[i]))) last_preserved_time_ = *t;
    }
  }
}

std::vector<std::uint64_t> CheckpointManager::numbers() const {
  return internal::listed_checkpoint_numbers(directory_, options_.checkpoint_name, "CheckpointManager");
}

std::string CheckpointManager::path_of(std::uint64_t number) const {
  return internal::join(directory_, internal::checkpoint_file_name(options_.checkpoint_name, number));
}

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  const std::vector<std::uint64_t> n = numbers();
  if (n.empty()) return std::nullopt;
  return path_of(n.back());
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> out;
  for (std::uint64_t n : numbers()) {
    if (kept_for_good_.count(n) == 0) out.push_back(path_of(n));
  }
  return out;
}

void CheckpointManager::sweep() {
  if (!options_.max_to_keep.has_value()) return;
  // After a commit: a directory that cannot be listed now deletes nothing
  // (the save itself succeeded).
  std::error_code ec;
  std::vector<std::uint64_t> candidates;
  for (std::uint64_t n : internal::checkpoint_numbers(directory_, options_.checkpoint_name, ec)) {
    if (kept_for_good_.count(n) == 0) candidates.push_back(n);
  }
  const auto keep = static_cast<std::size_t>(*options_.max_to_keep);
  for (std::size_t i = 0; i + keep < candidates.size(); ++i) {
    const std::string path = path_of(candidates[i]);
    const std::optional<double> t = saved_at(path);
    if (options_.keep_checkpoint_every_n_hours.has_value() && t.has_value() &&
        *t - *options_.keep_checkpoint_every_n_hours * 3600.0 >= last_preserved_time_) {
      last_preserved_time_ = *t;
      kept_for_good_.insert(candidates[i]);
      continue;
    }
    // A file that cannot be removed stays; the save itself succeeded.
    std::error_code ignored;
    fs::remove(path, ignored);
  }
}

std::optional<std::string> CheckpointManager::save(std::optional<std::int64_t> checkpoint_number, bool check_interval) {
  if (checkpoint_number.has_value() && *checkpoint_number < 0) {
    throw InvalidArgumentError("CheckpointManager::save: expected a checkpoint_number >= 0, got " +
                               std::to_string(*checkpoint_number));
  }
  // (The step counts as saved once the save succeeded: a failed save is
  // retried at the next call.)
  std::int64_t step = 0;
  if (options_.checkpoint_interval.has_value()) {
    step = options_.step_counter();
    if (last_checkpoint_step_.has_value()) {
      if (step == *last_checkpoint_step_) return std::nullopt;
      if (check_interval && step < *last_checkpoint_step_ + *options_.checkpoint_interval) return std::nullopt;
    }
  }
  // The chief numbers, writes and deletes; every worker gets the path.
  std::function<std::string()> file_name;
  if (checkpoint_number.has_value()) {
    file_name = [&] {
      const std::vector<std::uint64_t> existing = numbers();
      const auto number = static_cast<std::uint64_t>(*checkpoint_number);
      if (!existing.empty() && number < existing.back()) {
        throw InvalidArgumentError("CheckpointManager::save: checkpoint_number " + std::to_string(number) +
                                   " is below the latest checkpoint's, " + path_of(existing.back()) +
                                   ", which would stay the latest; remove the later checkpoints first");
      }
      return internal::checkpoint_file_name(options_.checkpoint_name, number);
    };
  } else {
    file_name = internal::NumberedNames(directory_, options_.checkpoint_name, "CheckpointManager::save");
  }
  std::string path =
      checkpoint_->commit(directory_, "CheckpointManager::save", /*create_directory=*/true,
                          /*numbered=*/!checkpoint_number.has_value(), file_name, [&](const std::string&) { sweep(); });
  if (options_.checkpoint_interval.has_value()) last_checkpoint_step_ = step;
  // The other workers learn what the chief kept for good from the
  // directory, as a new manager would.
  if (options_.max_to_keep.has_value() && options_.keep_checkpoint_every_n_hours.has_value()) {
    std::error_code ec;  // the save succeeded: a failed listing here changes nothing
    const std::vector<std::uint64_t> existing = internal::checkpoint_numbers(directory_, options_.checkpoint_name, ec);
    const auto keep = static_cast<std::size_t>(*options_.max_to_keep);
    for (std::size_t i = 0; i + keep < existing.size(); ++i) kept_for_good_.insert(existing[i]);
  }
  return path;
}

std::optional<std::string> CheckpointManager::restore_or_initialize(const RestoreOptions& options) {
  // Every worker takes the chief's answer (only the chief lists):
  // restoring is collective, so the workers must not split between restore
  // and init_fn, nor one leave with an error of its own listing.
  Strategy& strategy = checkpoint_->strategy_for("restore");
  const std::optional<std::string> latest = internal::chiefs_latest(
      strategy, directory_, "CheckpointManager::restore_or_initialize", [this] { return latest_checkpoint(); });
  if (latest.has_value()) {
    checkpoint_->restore(*latest, options);
    if (options_.checkpoint_interval.has_value()) last_checkpoint_step_ = options_.step_counter();
    return latest;
  }
  if (options_.init_fn) options_.init_fn();
  return std::nullopt;
}

}  // namespace distribute
