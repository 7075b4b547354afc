// CheckpointManager: TF's tf.train.CheckpointManager over a Checkpoint.
//
//   Checkpoint ckpt;
//   ckpt.track("step", &step);
//   ...
//   CheckpointManager manager(ckpt, "/ckpt", {.max_to_keep = 3,
//                                             .step_counter = [&] { return step; },
//                                             .checkpoint_interval = 100});
//   manager.restore_or_initialize();      // the latest checkpoint, if any
//   for (...; ++step) {
//     ...
//     manager.save();                     // saves every 100 steps
//   }
//
// Files are <directory>/<checkpoint_name>-<N>.dckpt, written atomically by
// Checkpoint (all or nothing; multi-worker: only the chief writes, and
// deletes). The latest checkpoint is the highest-numbered one (as
// latest_checkpoint(); numbers only grow: see save()).
//
// Which files are deleted (TF's rules): after a save, while more than
// max_to_keep files of this name remain, the oldest goes, unless
// keep_checkpoint_every_n_hours is set and it was saved at least that many
// hours after the last file kept that way (or, for the first one, after
// the manager was made), in which case it is kept for good and no longer
// counted. A file's save time is its modification time, so a manager made
// later on the same directory (a restarted job) applies the same rules:
// with keep_checkpoint_every_n_hours it takes the files beyond the newest
// max_to_keep as kept for good, and the newest of them as the last one
// kept; without it, such files are deleted by its first save.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "distribute/checkpoint.h"

namespace distribute {

struct CheckpointManagerOptions {
  // Files of this name kept by save(); std::nullopt keeps all. >= 1.
  std::optional<int> max_to_keep = 5;
  // Keep one file every this many hours for good (> 0), besides the newest
  // max_to_keep.
  std::optional<double> keep_checkpoint_every_n_hours = std::nullopt;
  // The files' name: <checkpoint_name>-<N>.dckpt. Non-empty, no '/'.
  std::string checkpoint_name = "ckpt";
  // The training step (TF's step_counter variable): read by save() when
  // checkpoint_interval is set, and by restore_or_initialize().
  std::function<std::int64_t()> step_counter = {};
  // save() writes only when the step counter has moved at least this many
  // steps since the last save (or restore); needs step_counter. > 0.
  std::optional<std::int64_t> checkpoint_interval = std::nullopt;
  // restore_or_initialize() calls it when there is no checkpoint yet.
  std::function<void()> init_fn = {};
};

class CheckpointManager {
 public:
  // Manages `checkpoint`'s files in `directory` (created at the first save
  // if missing). `checkpoint` must outlive the manager. Raises
  // InvalidArgumentError for bad options (naming the field).
  CheckpointManager(Checkpoint& checkpoint, std::string directory, CheckpointManagerOptions options = {});

  // Saves <checkpoint_name>-<N>.dckpt and returns its path, then deletes
  // old files as above. N: checkpoint_number, else one more than the
  // highest number of this name in the directory. With checkpoint_interval
  // (and check_interval), returns std::nullopt without saving unless the
  // step counter moved at least the interval since the last save; at the
  // same step as the last successful save, never saves. InvalidArgumentError for a
  // negative checkpoint_number or one below the highest already there (a
  // later checkpoint exists: the latest would not be this one; equal
  // overwrites it); otherwise Checkpoint::save's errors.
  std::optional<std::string> save(std::optional<std::int64_t> checkpoint_number = std::nullopt,
                                  bool check_interval = true);

  // Restores the latest checkpoint if there is one and returns its path
  // (the step counter's value then counts as the last save's); else calls
  // init_fn (if set) and returns std::nullopt. With several workers only
  // the chief (worker 0) lists, and every worker restores that file's name
  // in its own directory (latest_checkpoint(directory, strategy)); the
  // chief's listing error is raised on every worker. Checkpoint::restore's
  // errors.
  std::optional<std::string> restore_or_initialize(const RestoreOptions& options = {});

  // The latest checkpoint of this name in the directory, if any (none
  // when the directory does not exist yet; a directory that cannot be
  // listed raises, as ::distribute::latest_checkpoint does). checkpoints()
  // raises the same way.
  std::optional<std::string> latest_checkpoint() const;
  // The files the manager may still delete, oldest first (the ones kept
  // for good by keep_checkpoint_every_n_hours are not listed, as TF).
  std::vector<std::string> checkpoints() const;
  const std::string& directory() const noexcept { return directory_; }
  std::optional<std::int64_t> checkpoint_interval() const noexcept { return options_.checkpoint_interval; }

 private:
  std::vector<std::uint64_t> numbers() const;
  std::string path_of(std::uint64_t number) const;
  // Deletes beyond max_to_keep (the chief, after a commit).
  void sweep();

  Checkpoint* checkpoint_;
  std::string directory_;
  CheckpointManagerOptions options_;
  std::set<std::uint64_t> kept_for_good_;
  double last_preserved_time_;  // seconds since the epoch
  std::optional<std::int64_t> last_checkpoint_step_;
};

}  // namespace distribute
