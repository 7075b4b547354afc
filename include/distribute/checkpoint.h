// Checkpoint: saves and restores training state, all or nothing.
//
// A Checkpoint tracks named state and writes it to numbered files in a
// directory (TF's tf.train.Checkpoint and tf.train.CheckpointManager in one
// object):
//
//   Checkpoint ckpt({.max_to_keep = 3});
//   ckpt.track("dense0/kernel", kernel);       // a Variable (a handle: the checkpoint shares it)
//   ckpt.track("step", &step);                 // an int64_t (uint64_t, int) the caller owns
//   ckpt.track("rng", &rng_state);             // a Tensor the caller owns
//   std::string path = ckpt.save("/ckpt");     // "/ckpt/ckpt-1.dckpt"
//   ...
//   if (auto latest = latest_checkpoint("/ckpt")) ckpt.restore(*latest);
//   // (with several workers: latest_checkpoint("/ckpt", strategy), the
//   // chief's answer on every worker)
//
// What is saved (TF's saveables, TF_SEMANTICS 5.6): a variable's value as
// cross-replica context reads it (a MirroredVariable's value, a
// SyncOnReadVariable's aggregate: SUM, MEAN or the first replica's), so a
// checkpoint holds one tensor per variable whatever the replica count.
// Restoring assigns it in cross-replica context, which writes every
// component (a SUM SyncOnReadVariable stores value / N in each of its N
// components, an integer one the remainder in the first as well, so its
// total is kept). A checkpoint saved with N replicas
// therefore restores into a strategy with any other replica count, and into
// ordinary (non-distributed) variables, and the other way round.
//
// Atomicity. save() serializes everything in memory, writes a temporary
// file of its own (<directory>/.dckpt-<pid>-<k>.tmp), fsyncs it,
// renames it to ckpt-<N>.dckpt without replacing any file of that name (if
// another writer, a thread or a process, took N meanwhile, the next number)
// and fsyncs the directory; a failure removes the temporary file and leaves
// the directory as it was. restore() reads and checks the whole file (magic,
// format version, length, CRC32C of the header and of every entry, the set of
// names, each dtype and shape) before it changes anything: a failed restore
// leaves every tracked value untouched. The byte layout is in
// docs/checkpoint_format.md.
//
// Multi-worker (MultiWorkerMirroredStrategy): every worker calls save() and
// restore() with the same tracked names in the same order (reading a
// SyncOnReadVariable is a collective). Only the chief (worker 0) writes;
// save() returns on every worker once the chief has committed the file,
// with its name joined with that worker's own `directory` (or raises the
// chief's error on every worker). Every worker reads the file at restore()
// (a shared file system, as with TF); if any worker's checks fail, every
// worker raises and no worker changes its state. With one worker nothing
// here needs MPI.
//
// The strategy used is that of the tracked distributed variables (all must
// belong to one), else the current strategy (get_strategy()) at the call.
// save() and restore() must be called in cross-replica context or the
// default state, not inside a replica function (FailedPreconditionError).
//
// Thread safety: a Checkpoint is thread-compatible (one caller at a time);
// save() and restore() must not race with Strategy::run updating the tracked
// variables, nor with other writes to the tracked integers and tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "distribute/tensor.h"
#include "distribute/variable.h"

namespace distribute {

class Strategy;
class DistributedIterator;

struct CheckpointOptions {
  // How many checkpoint files save() keeps in its directory: after a commit,
  // all but the max_to_keep highest-numbered ckpt-<N>.dckpt are deleted.
  // std::nullopt keeps every one. Must be >= 1 (InvalidArgumentError).
  // Default: 5, as TF's CheckpointManager examples use.
  std::optional<int> max_to_keep = 5;
};

struct RestoreOptions {
  // TF's restore(...).expect_partial(): entries of the file that this
  // Checkpoint does not track are left out instead of refused. Every
  // tracked name must still be in the file, and every check still runs
  // before anything changes.
  bool expect_partial = false;
};

class CheckpointManager;

class Checkpoint {
 public:
  // The format version save() writes and the only one restore() reads.
  static constexpr std::uint32_t kFormatVersion = 1;

  explicit Checkpoint(CheckpointOptions options = {});

  // Tracks state under `name` (any non-empty string of at most 65536
  // bytes; names are unique: InvalidArgumentError on a repeat or a longer
  // name). Pointers must stay valid while the
  // Checkpoint is used; a Variable is a handle and is kept.
  void track(const std::string& name, Variable variable);
  // Saved as an int64 scalar (a uint64_t keeps its bits; all three read
  // back from an int64 scalar entry, so a counter may change between these
  // types from one run to the next). For an int (int32_t) restore() raises
  // InvalidArgumentError naming the entry when the saved value does not fit
  // in 32 bits (e.g. it was saved from an int64_t).
  void track(const std::string& name, std::int64_t* value);
  void track(const std::string& name, std::uint64_t* value);
  void track(const std::string& name, std::int32_t* value);
  // Saved with its dtype and shape; restore() replaces *tensor with a tensor
  // of the same dtype and shape.
  void track(const std::string& name, Tensor* tensor);
  // A distributed dataset's iterator (TF's tf.train.Checkpoint(iterator=it)):
  // saved as its position, restored by replay (a new iterator of the same
  // distributed dataset that skips the saved number of steps, with the
  // pipeline's reshuffling shuffles set back to the iterations they were
  // at), so that the next get_next() returns, bitwise, the step an
  // uninterrupted run would have returned, with the same or another number
  // of local replicas (the restored global batches are split across the
  // replicas of the strategy at hand). The skipped steps' input work is done
  // again. Raises UnimplementedError, naming the transformation, for a
  // pipeline that cannot be replayed in a new process (from_generator, a
  // shuffle without a seed). The datasets that flat_map and interleave
  // functions return are the function's business, as a map function's
  // hidden state is (they must give the same elements in a new process).
  // restore() raises InvalidArgumentError for a
  // position saved from another pipeline definition (a datasets_from_function
  // pipeline whose per-replica batch changed with the replica count
  // included), beyond the pipeline's end, or on another replica count whose
  // steps hold other rows (after a partial batch inside the stream). A
  // multi-worker iterator is saved and restored under its strategy (its
  // scope, or its tracked variables'): FailedPreconditionError otherwise.
  // The iterator must stay valid while the Checkpoint is used; restore()
  // replaces it (move-assignment).
  void track(const std::string& name, DistributedIterator& iterator);

  // Names in tracking order.
  std::vector<std::string> tracked_names() const;
  // Stops tracking `name` (its pointer may then dangle); returns whether it
  // was tracked.
  bool untrack(const std::string& name);

  // Writes a new checkpoint into `directory` (which must exist) and returns
  // its path, <directory>/ckpt-<N>.dckpt, N one more than the highest number
  // already there (1 in an empty directory). Then deletes the oldest files
  // beyond max_to_keep. Raises NotFoundError (missing directory),
  // FailedPreconditionError (not a directory, permission denied, read-only)
  // or UnavailableError (other I/O errors, e.g. a full disk), naming the path
  // and the system's reason; nothing is left behind.
  std::string save(const std::string& directory);

  // Writes a checkpoint to exactly `path` (TF's Checkpoint.write): no
  // numbering and no deletion of older files; the directory must exist.
  // Atomic and multi-worker as save(); returns `path`.
  std::string write(const std::string& path);

  // Restores every tracked value from the file at `path`. Raises, changing
  // nothing:
  //   NotFoundError: the file cannot be opened, or it lacks a tracked name;
  //   DataLossError: not a checkpoint (bad magic), truncated or too long
  //     (expected vs got bytes), a CRC32C mismatch (naming the entry or the
  //     header), or a malformed entry;
  //   FailedPreconditionError: a format version other than kFormatVersion
  //     (found vs supported), a path that is not a regular file (a
  //     directory, a FIFO), workers that read different bytes (each
  //     worker's size and 64-bit hash named), or a call inside a replica
  //     function;
  //   AbortedError (on the other workers): a worker whose checks failed
  //     (named; its own error says why);
  //   InvalidArgumentError: names in the file that are not tracked, an
  //     entry whose dtype or shape differs from the tracked value's (both
  //     named), or a value beyond the range of a tracked int32_t (naming
  //     the entry, the value and the range). With expect_partial, names
  //     in the file that are not tracked are left out.
  void restore(const std::string& path, const RestoreOptions& options = {});

 private:
  struct Entry {
    std::string name;
    std::variant<Variable, std::int64_t*, std::uint64_t*, std::int32_t*, Tensor*, DistributedIterator*> target;
  };
  friend class CheckpointManager;
  void add(Entry entry);
  // What save(), write() and CheckpointManager::save share: every worker
  // reads the tracked values; the chief (creating `directory` if told)
  // writes them atomically as `directory`/file_name(), then calls
  // after_commit(path) (which may throw: the new file is then removed and
  // the save fails); every worker returns the path or raises the chief's
  // error. `numbered`: file_name() is a new number, never written over (if
  // another writer takes it first, file_name() is asked again); otherwise
  // an existing file of that name is replaced. `method` names the call in
  // errors.
  std::string commit(const std::string& directory, const char* method, bool create_directory, bool numbered,
                     const std::function<std::string()>& file_name,
                     const std::function<void(const std::string&)>& after_commit);
  // The tracked distributed variables' strategy, else get_strategy();
  // raises inside a replica function.
  Strategy& strategy_for(const char* method) const;
  static std::vector<std::int64_t> over_workers(Strategy& strategy, std::int64_t value);
  // restore()'s steps (checkpoint.cc): the file's value for every tracked
  // entry, checked (names, dtypes, shapes, ranges); the tracked iterators'
  // pipelines against their saved fingerprints (over the workers); the
  // iterators replayed to their saved positions, on new ones; the replayed
  // rows against the saved ones (over the workers); the tracked values
  // changed.
  // What restore() compares over the workers: the bytes each one read.
  struct FileIdentity {
    std::uint64_t size = 0;
    std::uint64_t hash = 0;  // internal::fnv1a_words of the bytes
  };
  // `identity`, when given, receives the file's (computed only then: a
  // pass over every byte, which one worker alone has no use for).
  std::vector<Tensor> read_tracked(const std::string& path, const RestoreOptions& options,
                                   FileIdentity* identity) const;
  void check_pipelines(Strategy& strategy, const std::string& path, const std::vector<Tensor>& restored) const;
  std::vector<std::optional<DistributedIterator>> replay_iterators(const std::string& path,
                                                                   const std::vector<Tensor>& restored) const;
  void check_replayed_rows(Strategy& strategy, const std::string& path, const std::vector<Tensor>& restored,
                           const std::vector<std::optional<DistributedIterator>>& replayed) const;
  void assign(std::vector<Tensor>& restored, std::vector<std::optional<DistributedIterator>>& replayed);

  CheckpointOptions options_;
  std::vector<Entry> entries_;
};

// The path of the highest-numbered ckpt-<N>.dckpt in `directory`, or
// std::nullopt when there is none (or no such directory), as
// tf.train.latest_checkpoint. A directory that exists but cannot be listed
// (permissions, not a directory, I/O) raises (FailedPreconditionError,
// UnavailableError) rather than reading as "no checkpoint": a job resumed
// over it would otherwise start again from scratch.
std::optional<std::string> latest_checkpoint(const std::string& directory);

// The chief's (worker 0's) latest_checkpoint(directory), on every worker
// of `strategy`: what a multi-worker job restores, since each worker's own
// listing may name another file (a listing that lags on a network file
// system, a directory that is not shared). Only worker 0 lists; every
// worker gets that file's name joined with its own `directory` (the file
// must be there: a shared file system, mounted anywhere). With several
// workers it is a collective: every worker calls it; worker 0's error (a
// directory it cannot list) is raised on every worker. Inside a replica
// function: FailedPreconditionError. With one worker it is
// latest_checkpoint().
std::optional<std::string> latest_checkpoint(const std::string& directory, Strategy& strategy);

// Every entry of the checkpoint file at `path`, in the order they were
// saved, after the checks of restore() (magic, version, length, CRC32Cs),
// with the same errors; nothing needs to be tracked. Like TF's
// tf.train.load_checkpoint / list_variables, for inspecting or comparing
// checkpoints. Scalars saved from int64/uint64/int32 values read as int64
// tensors.
std::vector<std::pair<std::string, Tensor>> load_checkpoint(const std::string& path);

}  // namespace distribute
