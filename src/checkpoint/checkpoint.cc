// Checkpoint: tracking, the commit every save goes through (only the chief
// writes; every worker learns the outcome), and validation before any change.
// The byte format is in checkpoint_codec.cc, the files in checkpoint_files.cc.
#include "distribute/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "checkpoint/checkpoint_codec.h"
#include "checkpoint/checkpoint_files.h"
#include "core/describe.h"
#include "core/fnv1a.h"
#include "data/iterator_state.h"
#include "distribute/errors.h"
#include "distribute/replica_context.h"
#include "distribute/strategy.h"
#include "strategy/context.h"
#include "strategy/strategy_access.h"

namespace distribute {

using internal::checkpoint_file_name;
using internal::checkpoint_numbers;
using internal::decode;
using internal::encode;
using internal::join;
using internal::NamedTensor;
using internal::quote_name;
using internal::read_file;
using internal::throw_io_error;

namespace {

namespace fs = std::filesystem;

// save()'s files: ckpt-<N>.dckpt.
constexpr const char* kName = "ckpt";

}  // namespace

// ---- Checkpoint ----

Checkpoint::Checkpoint(CheckpointOptions options) : options_(options) {
  if (options_.max_to_keep.has_value() && *options_.max_to_keep < 1) {
    throw InvalidArgumentError(
        "CheckpointOptions::max_to_keep: expected at least 1 (or std::nullopt to keep every "
        "checkpoint), got " +
        std::to_string(*options_.max_to_keep));
  }
}

void Checkpoint::add(Entry entry) {
  if (entry.name.empty()) throw InvalidArgumentError("Checkpoint::track: expected a non-empty name");
  if (entry.name.size() > internal::kMaxCheckpointNameLength) {
    throw InvalidArgumentError("Checkpoint::track: expected a name of at most " +
                               std::to_string(internal::kMaxCheckpointNameLength) + " bytes (what a checkpoint file " +
                               "can hold), got one of " + std::to_string(entry.name.size()) + " bytes, beginning " +
                               quote_name(entry.name.substr(0, 40)));
  }
  for (const Entry& e : entries_) {
    if (e.name == entry.name) {
      throw InvalidArgumentError("Checkpoint::track: the name " + quote_name(entry.name) +
                                 " is already tracked; every tracked value needs its own name");
    }
  }
  entries_.push_back(std::move(entry));
}

void Checkpoint::track(const std::string& name, Variable variable) { add({name, std::move(variable)}); }

void Checkpoint::track(const std::string& name, std::int64_t* value) {
  if (value == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, value});
}

void Checkpoint::track(const std::string& name, std::uint64_t* value) {
  if (value == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, value});
}

void Checkpoint::track(const std::string& name, std::int32_t* value) {
  if (value == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, value});
}

void Checkpoint::track(const std::string& name, Tensor* tensor) {
  if (tensor == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  if (!is_numeric(tensor->dtype())) {
    throw UnimplementedError("Checkpoint::track(" + quote_name(name) +
                             "): the checkpoint format holds number tensors, got dtype " +
                             std::string(dtype_name(tensor->dtype())));
  }
  add({name, tensor});
}

void Checkpoint::track(const std::string& name, DistributedIterator& iterator) {
  internal::IteratorAccess::check_replayable(iterator, "Checkpoint::track(" + quote_name(name) + ")");
  add({name, &iterator});
}

namespace {

// An iterator's position as a checkpoint entry: int64 [steps, rows,
// fingerprint, shuffle iterations...] (data/iterator_state.h).
Tensor position_tensor(const internal::IteratorPosition& p) {
  std::vector<std::int64_t> v{p.steps, p.rows, std::bit_cast<std::int64_t>(p.fingerprint)};
  for (std::uint64_t k : p.shuffle_iterations) v.push_back(std::bit_cast<std::int64_t>(k));
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor(std::move(v), Shape{n});
}

}  // namespace

// Every worker's `value`, in worker order (a collective when there are
// several workers; just `value` otherwise).
std::vector<std::int64_t> Checkpoint::over_workers(Strategy& strategy, std::int64_t value) {
  if (strategy.num_workers() <= 1) return {value};
  const Tensor all = internal::StrategyAccess::gather_over_workers(
      strategy, Tensor(std::vector<std::int64_t>{value}, Shape{1}), 0, "checkpoint iterator");
  const auto v = all.data<std::int64_t>();
  return {v.begin(), v.end()};
}

namespace {

// A tracked iterator's rows summed over the workers (each reads its own
// shard), and its pipeline's fingerprint combined over them (with
// distribute_datasets_from_function each worker has its own pipeline).
std::int64_t total(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

std::uint64_t combined(const std::vector<std::int64_t>& fingerprints) {
  if (fingerprints.size() == 1) return std::bit_cast<std::uint64_t>(fingerprints[0]);
  internal::Fnv1a h;
  for (std::int64_t f : fingerprints) h.mix(std::bit_cast<std::uint64_t>(f));
  return h.value();
}

internal::IteratorPosition position_of(const Tensor& t) {
  const auto v = t.data<std::int64_t>();
  internal::IteratorPosition p;
  p.steps = v[0];
  p.rows = v[1];
  p.fingerprint = std::bit_cast<std::uint64_t>(v[2]);
  for (std::size_t k = 3; k < v.size(); ++k) p.shuffle_iterations.push_back(std::bit_cast<std::uint64_t>(v[k]));
  return p;
}

}  // namespace

bool Checkpoint::untrack(const std::string& name) {
  return std::erase_if(entries_, [&](const Entry& e) { return e.name == name; }) > 0;
}

std::vector<std::string> Checkpoint::tracked_names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

Strategy& Checkpoint::strategy_for(const char* method) const {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode != nullptr && mode->replica != nullptr) {
    throw FailedPreconditionError(std::string("Checkpoint::") + method + ": called inside a replica function of " +
                                  mode->strategy->to_string() +
                                  "; call it in cross-replica context (outside strategy.run)");
  }
  Strategy* strategy = nullptr;
  const std::string* owner = nullptr;
  for (const Entry& e : entries_) {
    const auto* v = std::get_if<Variable>(&e.target);
    if (v == nullptr || v->distributed_strategy() == nullptr) continue;
    if (strategy != nullptr && strategy != v->distributed_strategy()) {
      throw InvalidArgumentError(std::string("Checkpoint::") + method + ": the tracked variables belong to " +
                                 "different strategies: " + quote_name(*owner) + " to " + strategy->to_string() + ", " +
                                 quote_name(e.name) + " to " + v->distributed_strategy()->to_string() +
                                 "; use one Checkpoint per strategy");
    }
    strategy = v->distributed_strategy();
    owner = &e.name;
  }
  Strategy& chosen = strategy != nullptr ? *strategy : get_strategy();
  // The workers of a multi-worker iterator agree on its steps through its
  // own strategy: saving or restoring it under another one (every worker
  // writing the file itself, say) is refused.
  for (const Entry& e : entries_) {
    const auto* it = std::get_if<DistributedIterator*>(&e.target);
    if (it == nullptr || !internal::IteratorAccess::across_workers(**it) ||
        internal::IteratorAccess::origin(**it) == chosen.id()) {
      continue;
    }
    throw FailedPreconditionError(std::string("Checkpoint::") + method + ": the tracked iterator " + quote_name(e.name) +
                                  " comes from strategy #" + std::to_string(internal::IteratorAccess::origin(**it)) +
                                  ", but the checkpoint would use " + chosen.to_string() +
                                  " (the tracked variables' strategy, else the current one); call " + method +
                                  " inside the iterator's strategy's scope");
  }
  return chosen;
}

std::string Checkpoint::commit(const std::string& directory, const char* method, bool create_directory,
                               bool numbered, const std::function<std::string()>& file_name,
                               const std::function<void(const std::string&)>& after_commit) {
  Strategy& strategy = strategy_for("save");
  // Every worker reads every value, in tracking order: reading a
  // SyncOnReadVariable in cross-replica context is a collective.
  std::vector<NamedTensor> values;
  values.reserve(entries_.size());
  for (const Entry& e : entries_) {
    Tensor value = std::visit(
        [&strategy](const auto& target) -> Tensor {
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, Variable>) {
            return target.value();
          } else if constexpr (std::is_same_v<T, std::int64_t*>) {
            return Tensor(*target);
          } else if constexpr (std::is_same_v<T, std::uint64_t*>) {
            return Tensor(std::bit_cast<std::int64_t>(*target));
          } else if constexpr (std::is_same_v<T, std::int32_t*>) {
            return Tensor(static_cast<std::int64_t>(*target));
          } else if constexpr (std::is_same_v<T, DistributedIterator*>) {
            internal::IteratorPosition p = internal::IteratorAccess::position(*target);
            p.rows = total(over_workers(strategy, p.rows));
            p.fingerprint = combined(over_workers(strategy, std::bit_cast<std::int64_t>(p.fingerprint)));
            return position_tensor(p);
          } else {
            return *target;
          }
        },
        e.target);
    values.push_back({e.name, std::move(value)});
  }
  const std::vector<std::byte> bytes = encode(values);

  // Worker 0, the chief (the only worker, usually), writes; every worker
  // returns after its commit, or raises its error. (Not is_chief(): every
  // evaluator task is a chief of its own.)
  const std::optional<std::string> written = internal::from_worker_zero(
      strategy, directory, method, "the chief (worker 0) could not save the checkpoint",
      [&]() -> std::optional<std::string> {
        if (create_directory) {
          std::error_code ec;
          fs::create_directories(directory, ec);
          if (ec) throw_io_error(std::string(method) + ": cannot create the directory", directory, ec.value());
        }
        struct stat st {};
        if (::stat(directory.c_str(), &st) != 0) throw_io_error(std::string(method) + ": directory", directory, errno);
        if (!S_ISDIR(st.st_mode)) throw_io_error(std::string(method) + ": directory", directory, ENOTDIR);
        std::error_code ignored;
        bool overwrites = false;
        std::string path;
        internal::TemporaryFile file(directory, bytes);
        if (numbered) {
          // Another writer (a thread, a process) may take the same new
          // number first: then the next one (file_name() never repeats a
          // number), renaming the same file.
          constexpr int kAttempts = 100;
          for (int attempt = 1;; ++attempt) {
            path = join(directory, file_name());
            if (file.commit(path, /*replace=*/false)) break;
            if (attempt == kAttempts) {
              throw AbortedError(std::string(method) + ": another writer took each new checkpoint number first, " +
                                 std::to_string(kAttempts) + " times in a row (the last " + quote_name(path) +
                                 "); nothing was written");
            }
          }
        } else {
          path = join(directory, file_name());
          overwrites = fs::exists(path, ignored);
          file.commit(path, /*replace=*/true);
        }
        if (after_commit) {
          try {
            after_commit(path);
          } catch (...) {
            // A new file is taken back; one that replaced an older file of
            // the same name stays (the older one is gone either way).
            if (!overwrites) fs::remove(path, ignored);
            throw;
          }
        }
        return path;
      });
  return written.value();
}

std::string Checkpoint::save(const std::string& directory) {
  // Keep the newest max_to_keep (the one just written included). A file
  // that cannot be removed stays; the save itself succeeded.
  auto keep_newest = [&](const std::string&) {
    if (!options_.max_to_keep.has_value()) return;
    std::error_code ec;
    std::vector<std::uint64_t> kept = checkpoint_numbers(directory, kName, ec);
    const auto keep = static_cast<std::size_t>(*options_.max_to_keep);
    for (std::size_t i = 0; !ec && i + keep < kept.size(); ++i) {
      std::error_code ignored;
      fs::remove(join(directory, checkpoint_file_name(kName, kept[i])), ignored);
    }
  };
  return commit(directory, "Checkpoint::save", /*create_directory=*/false, /*numbered=*/true,
                internal::NumberedNames(directory, kName, "Checkpoint::save"), keep_newest);
}

std::string Checkpoint::write(const std::string& path) {
  const fs::path p(path);
  if (!p.has_filename()) throw InvalidArgumentError("Checkpoint::write: expected a file path, got " + quote_name(path));
  const std::string directory = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  const std::string name = p.filename().string();
  return commit(
      directory, "Checkpoint::write", /*create_directory=*/false, /*numbered=*/false, [name] { return name; },
      nullptr);
}

std::vector<std::pair<std::string, Tensor>> load_checkpoint(const std::string& path) {
  const std::vector<std::byte> file = read_file(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (NamedTensor& e : decode(file, path)) out.emplace_back(std::move(e.name), std::move(e.value));
  return out;
}

// restore() in steps: read and check the file, agree over the workers,
// check the iterators' pipelines, replay them, check the replayed rows,
// then change the tracked values. Everything is read and checked before any
// state changes.
void Checkpoint::restore(const std::string& path, const RestoreOptions& options) {
  Strategy& strategy = strategy_for("restore");
  std::vector<Tensor> restored;
  std::exception_ptr failure;
  FileIdentity file;
  try {
    restored = read_tracked(path, options, strategy.num_workers() > 1 ? &file : nullptr);
  } catch (...) {
    failure = std::current_exception();
  }
  if (strategy.num_workers() > 1) {
    // No worker changes anything unless every worker's checks passed
    // (assigning a SyncOnReadVariable is a collective, too) and every
    // worker read the same bytes: each worker picks and reads its file
    // itself, and a worker that listed the directory on its own (a
    // latest_checkpoint of its own, a file system that is not shared, or
    // one whose listing lags) may have read another file.
    const Tensor outcome = internal::StrategyAccess::gather_over_workers(
        strategy,
        Tensor(std::vector<std::int64_t>{failure ? 1 : 0, static_cast<std::int64_t>(file.size),
                                         std::bit_cast<std::int64_t>(file.hash)},
               Shape{3}),
        0);
    if (failure) std::rethrow_exception(failure);
    std::string workers;
    const auto v = outcome.data<std::int64_t>();
    const std::size_t count = v.size() / 3;
    for (std::size_t w = 0; w < count; ++w) {
      if (v[3 * w] != 0) workers += (workers.empty() ? "" : ", ") + std::to_string(w);
    }
    if (!workers.empty()) {
      throw AbortedError("Checkpoint::restore(" + path + "): worker(s) " + workers +
                         " could not restore it (their errors say why); no worker changed its state");
    }
    bool same = true;
    std::string read;
    for (std::size_t w = 0; w < count; ++w) {
      same = same && v[3 * w + 1] == v[1] && v[3 * w + 2] == v[2];
      read += (w == 0 ? "" : "; ") + std::string("worker ") + std::to_string(w) + ": " + std::to_string(v[3 * w + 1]) +
              " bytes, hash " + internal::hex(std::bit_cast<std::uint64_t>(v[3 * w + 2]));
    }
    if (!same) {
      throw FailedPreconditionError("Checkpoint::restore(" + path +
                                    "): the workers read different files (" + read +
                                    "); every worker must restore the same checkpoint, from a shared file system: take "
                                    "the chief's choice (CheckpointManager::restore_or_initialize does); no worker "
                                    "changed its state");
    }
  }
  if (failure) std::rethrow_exception(failure);
  check_pipelines(strategy, path, restored);
  // Iterators are replayed into new ones before anything changes, each
  // worker on its own (a replay fails when the pipeline ends before the
  // saved position, or raises the pipeline's own error); then the workers
  // agree on the outcome.
  std::vector<std::optional<DistributedIterator>> replayed;
  try {
    replayed = replay_iterators(path, restored);
  } catch (...) {
    failure = std::current_exception();
  }
  if (strategy.num_workers() > 1) {
    const Tensor failed = internal::StrategyAccess::gather_over_workers(
        strategy, Tensor({failure ? std::int64_t{1} : std::int64_t{0}}), 0);
    if (failure) std::rethrow_exception(failure);
    for (std::int64_t f : failed.data<std::int64_t>()) {
      if (f != 0) {
        throw AbortedError("Checkpoint::restore(" + path + "): a worker could not replay a tracked iterator (its "
                           "error says why); no worker changed its state");
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  check_replayed_rows(strategy, path, restored, replayed);
  assign(restored, replayed);
}

std::vector<Tensor> Checkpoint::read_tracked(const std::string& path, const RestoreOptions& options,
                                             FileIdentity* identity) const {
  std::vector<Tensor> restored(entries_.size());
  const std::vector<std::byte> file = read_file(path);
  // (internal::fnv1a_words: the same on every worker, whatever its build.
  // Not a CRC32C of the file: the file ends with its last entry's CRC32C,
  // and a CRC of bytes followed by their own CRC is the same constant for
  // any bytes.)
  if (identity != nullptr) {
    *identity = {
        .size = file.size(),
        .hash = internal::fnv1a_words(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()))};
  }
  std::vector<NamedTensor> saved = decode(file, path);
  std::map<std::string, Tensor> by_name;
  for (NamedTensor& e : saved) by_name.emplace(std::move(e.name), std::move(e.value));
  std::vector<std::string> missing;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto it = by_name.find(entries_[i].name);
    if (it == by_name.end()) {
      missing.push_back(quote_name(entries_[i].name));
      continue;
    }
    restored[i] = std::move(it->second);
    by_name.erase(it);
  }
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!missing.empty()) {
    throw NotFoundError("checkpoint " + path + " has no entry for the tracked " + list(missing) +
                        " (was it saved by a Checkpoint tracking other names?)");
  }
  if (!by_name.empty() && !options.expect_partial) {
    std::vector<std::string> unexpected;
    for (const auto& [name, value] : by_name) unexpected.push_back(quote_name(name));
    throw InvalidArgumentError("checkpoint " + path + " holds " + list(unexpected) +
                               ", which this Checkpoint does not track; track the same names as the Checkpoint "
                               "that saved it, or restore with RestoreOptions::expect_partial to leave them out");
  }
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto [dtype, shape] = std::visit(
        [](const auto& target) -> std::pair<DType, Shape> {
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, Variable>) {
            return {target.dtype(), target.shape()};
          } else if constexpr (std::is_same_v<T, Tensor*>) {
            return {target->dtype(), target->shape()};
          } else if constexpr (std::is_same_v<T, DistributedIterator*>) {
            const auto n = 3 + internal::IteratorAccess::position(*target).shuffle_iterations.size();
            return {DType::kInt64, Shape{static_cast<std::int64_t>(n)}};
          } else {
            return {DType::kInt64, Shape{}};
          }
        },
        entries_[i].target);
    if (std::holds_alternative<DistributedIterator*>(entries_[i].target) &&
        (restored[i].dtype() != dtype || restored[i].shape() != shape)) {
      throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) +
                                 " was saved from another input pipeline than the tracked iterator's (its position "
                                 "is " +
                                 internal::describe(restored[i].dtype(), restored[i].shape()) +
                                 ", the tracked iterator's " + internal::describe(dtype, shape) +
                                 ": another number of shuffles)");
    }
    if (restored[i].dtype() != dtype || restored[i].shape() != shape) {
      throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) + " was saved with " +
                                 internal::describe(restored[i].dtype(), restored[i].shape()) +
                                 ", the tracked value has " + internal::describe(dtype, shape));
    }
    if (std::holds_alternative<DistributedIterator*>(entries_[i].target) && position_of(restored[i]).steps < 0) {
      throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) + " holds a position of " +
                                 std::to_string(position_of(restored[i]).steps) + " steps, expected at least 0");
    }
    if (std::holds_alternative<std::int32_t*>(entries_[i].target)) {
      const auto v = restored[i].item<std::int64_t>();
      if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) {
        throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) + " holds " +
                                   std::to_string(v) +
                                   ", the tracked int32 expects a value in [-2147483648, 2147483647]");
      }
    }
  }
  return restored;
}

void Checkpoint::check_pipelines(Strategy& strategy, const std::string& path,
                                 const std::vector<Tensor>& restored) const {
  // A tracked iterator's pipeline must be the one its position was saved
  // from (checked over the workers: every worker gets the same verdict).
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    auto* const* it = std::get_if<DistributedIterator*>(&entries_[i].target);
    if (it == nullptr) continue;
    const std::uint64_t mine =
        combined(over_workers(strategy, std::bit_cast<std::int64_t>(internal::IteratorAccess::fingerprint(**it))));
    if (mine != position_of(restored[i]).fingerprint) {
      throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) +
                                 " was saved from another input pipeline than the tracked iterator's (" +
                                 internal::IteratorAccess::describe(**it) +
                                 "); restore it into an iterator of the same pipeline definition");
    }
  }
}

std::vector<std::optional<DistributedIterator>> Checkpoint::replay_iterators(
    const std::string& path, const std::vector<Tensor>& restored) const {
  std::vector<std::optional<DistributedIterator>> replayed(entries_.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (auto* const* it = std::get_if<DistributedIterator*>(&entries_[i].target)) {
      replayed[i].emplace(internal::IteratorAccess::at(**it, position_of(restored[i]),
                                                       "checkpoint " + path + ": " + quote_name(entries_[i].name)));
    }
  }
  return replayed;
}

void Checkpoint::check_replayed_rows(Strategy& strategy, const std::string& path, const std::vector<Tensor>& restored,
                                     const std::vector<std::optional<DistributedIterator>>& replayed) const {
  // The replayed steps must hold the saved rows (summed over the workers:
  // every worker gets the same verdict): a partial batch inside the
  // stream is cut differently for another replica count.
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (!replayed[i].has_value()) continue;
    const internal::IteratorPosition saved = position_of(restored[i]);
    const std::int64_t rows = total(over_workers(strategy, internal::IteratorAccess::position(*replayed[i]).rows));
    if (rows != saved.rows) {
      throw InvalidArgumentError(
          "checkpoint " + path + ": " + quote_name(entries_[i].name) + " was saved after " +
          std::to_string(saved.steps) + " steps holding " + std::to_string(saved.rows) +
          " rows, and the same steps hold " + std::to_string(rows) + " rows split into " +
          std::to_string(internal::IteratorAccess::num_replicas(*replayed[i])) + " local replica(s)" +
          ": a partial batch inside the stream (batch without drop_remainder, then repeat) is cut differently for "
          "another replica count; restore with the replica count it was saved with");
    }
  }
}

void Checkpoint::assign(std::vector<Tensor>& restored, std::vector<std::optional<DistributedIterator>>& replayed) {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (replayed[i].has_value()) {
      *std::get<DistributedIterator*>(entries_[i].target) = std::move(*replayed[i]);
      continue;
    }
    std::visit(
        [&value = restored[i]](const auto& target) {
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, Variable>) {
            // A handle: assigns the tracked variable, with no collective
            // read of a SyncOnReadVariable's new value (every check has
            // passed on every worker: nothing here may fail half-way).
            Variable v = target;
            v.update(Variable::Update::kAssign, value, /*read_back=*/false);
          } else if constexpr (std::is_same_v<T, std::int64_t*>) {
            *target = value.item<std::int64_t>();
          } else if constexpr (std::is_same_v<T, std::uint64_t*>) {
            *target = std::bit_cast<std::uint64_t>(value.item<std::int64_t>());
          } else if constexpr (std::is_same_v<T, std::int32_t*>) {
            *target = static_cast<std::int32_t>(value.item<std::int64_t>());  // in range: checked above
          } else if constexpr (std::is_same_v<T, DistributedIterator*>) {
            // replaced above
          } else {
            *target = value;
          }
        },
        entries_[i].target);
  }
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  const std::vector<std::uint64_t> numbers = internal::listed_checkpoint_numbers(directory, kName, "latest_checkpoint");
  if (numbers.empty()) return std::nullopt;
  return join(directory, checkpoint_file_name(kName, numbers.back()));
}

std::optional<std::string> latest_checkpoint(const std::string& directory, Strategy& strategy) {
  return internal::chiefs_latest(strategy, directory, "latest_checkpoint",
                                 [&] { return latest_checkpoint(directory); });
}

namespace internal {

std::optional<std::string> chiefs_latest(Strategy& strategy, const std::string& directory, const char* method,
                                         const std::function<std::optional<std::string>()>& latest) {
  const ThreadMode* mode = current_mode();
  if (mode != nullptr && mode->replica != nullptr) {
    throw FailedPreconditionError(std::string(method) + ": called inside a replica function of " +
                                  mode->strategy->to_string() +
                                  "; call it in cross-replica context (outside strategy.run)");
  }
  return from_worker_zero(strategy, directory, method,
                          std::string(method) + ": the chief (worker 0) could not find the latest checkpoint", latest);
}

std::optional<std::string> from_worker_zero(Strategy& strategy, const std::string& directory, const char* method,
                                            const std::string& failed,
                                            const std::function<std::optional<std::string>()>& chief) {
  if (strategy.num_workers() <= 1) return chief();
  std::optional<std::string> path;
  std::exception_ptr failure;
  std::int64_t code = 0;  // worker 0's ErrorCode, 0 when `chief` returned
  std::string message;
  if (strategy.worker_index() == 0) {
    try {
      path = chief();
    } catch (const Error& e) {
      failure = std::current_exception();
      code = static_cast<std::int64_t>(e.code());
      message = e.message();
    } catch (...) {
      failure = std::current_exception();
      code = static_cast<std::int64_t>(ErrorCode::kUnknown);
      message = what_of(failure);
    }
  }
  // Worker 0's outcome, then the file's name (or its error) as text.
  const Tensor status = StrategyAccess::broadcast_from_chief(
      strategy, Tensor(std::vector<std::int64_t>{code, path ? 1 : 0}, Shape{2}));
  const std::string text = StrategyAccess::text_from_chief(
      strategy, failure ? message : fs::path(path.value_or("")).filename().string(), method);
  if (failure) std::rethrow_exception(failure);
  const auto s = status.data<std::int64_t>();
  if (s[0] != 0) throw_error(static_cast<ErrorCode>(s[0]), failed + ": " + text);
  if (strategy.worker_index() == 0) return path;
  if (s[1] == 0) return std::nullopt;
  return join(directory, text);
}

}  // namespace internal

}  // namespace distribute
