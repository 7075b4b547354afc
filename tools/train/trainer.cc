#include "trainer.h"

#include "model.h"
#include "optimizer.h"
#include "plot.h"
#include "progress.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <ostream>
#include <random>
#include <span>
#include <sstream>
#include <system_error>
#include <utility>

namespace distribute::train {
namespace {

constexpr std::int64_t kInputs = 64;
constexpr std::int64_t kClasses = 10;
constexpr double kTestFraction = 0.2;

// A double as a user typed it (shortest form that round-trips), for errors.
std::string fmt_number(double x) {
  std::array<char, 32> text{};
  const auto end = std::to_chars(text.data(), text.data() + text.size(), x).ptr;
  return std::string(text.data(), end);
}

// --- Data -------------------------------------------------------------------

struct Split {
  Tensor train_x, train_y, test_x, test_y;
};

// Gathers rows `order[begin, end)` of images (scaled to [0, 1]) and labels.
std::pair<Tensor, Tensor> gather_rows(const Digits& digits, const std::vector<std::int64_t>& order, std::size_t begin,
                                      std::size_t end) {
  const auto pixels = digits.images.data<float>();
  const auto labels = digits.labels.data<std::int32_t>();
  std::vector<float> x;
  std::vector<std::int32_t> y;
  x.reserve((end - begin) * kInputs);
  y.reserve(end - begin);
  for (std::size_t i = begin; i < end; ++i) {
    const auto row = static_cast<std::size_t>(order[i]);
    for (std::size_t j = 0; j < kInputs; ++j) x.push_back(pixels[row * kInputs + j] / 16.f);
    y.push_back(labels[row]);
  }
  const auto rows = static_cast<std::int64_t>(end - begin);
  return {Tensor(std::move(x), {rows, kInputs}), Tensor(std::move(y), {rows})};
}

// A fixed split: a permutation drawn from `seed`, its first 20 % for testing.
Split load_split(const std::string& path, std::uint64_t seed) {
  const Digits digits = path.empty() ? load_digits() : load_digits(path);
  if (digits.images.dim(1) != kInputs) {
    throw InvalidArgumentError("digits: expected 64 pixels per image, got " + std::to_string(digits.images.dim(1)));
  }
  const auto n = static_cast<std::size_t>(digits.images.dim(0));
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const auto test = static_cast<std::size_t>(static_cast<double>(n) * kTestFraction);
  auto [test_x, test_y] = gather_rows(digits, order, 0, test);
  auto [train_x, train_y] = gather_rows(digits, order, test, n);
  return {train_x, train_y, test_x, test_y};
}

// The shuffle seed of an epoch: a function of (seed, epoch) only, so a
// resumed run draws the same order as an uninterrupted one.
std::uint64_t epoch_seed(std::uint64_t seed, int epoch) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(epoch)};
  std::array<std::uint32_t, 2> words{};
  seq.generate(words.begin(), words.end());
  return (static_cast<std::uint64_t>(words[0]) << 32) | words[1];
}

double evaluate(const std::vector<Variable>& params, const Split& data) {
  const Pass pass = forward_backward(read_all(params), data.test_x, data.test_y, 0.f, /*want_grads=*/false);
  return static_cast<double>(pass.correct) / static_cast<double>(data.test_x.dim(0));
}

constexpr const char* kCsvHeader = "epoch,loss,accuracy,test_accuracy,seconds,samples_per_second";

// The rows of a learning-curve CSV for epochs 1..up_to (as written), their
// points appended to `curve`. A missing file gives none; a malformed one
// raises, naming the line.
std::vector<std::string> read_curve(const std::string& path, int up_to, std::vector<CurvePoint>& curve) {
  std::vector<std::string> rows;
  std::ifstream in(path);
  if (!in) return rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 || line.empty()) continue;  // the header
    CurvePoint p;
    char c1 = 0, c2 = 0, c3 = 0;
    std::istringstream fields(line);
    if (!(fields >> p.epoch >> c1 >> p.loss >> c2 >> p.accuracy >> c3 >> p.test_accuracy) || c1 != ',' ||
        c2 != ',' || c3 != ',') {
      throw DataLossError("learning curve '" + path + "' line " + std::to_string(number) +
                          ": expected epoch,loss,accuracy,test_accuracy,..., got '" + line + "'");
    }
    if (p.epoch < 1 || p.epoch > up_to) continue;
    if (!curve.empty() && p.epoch <= curve.back().epoch) continue;  // a repeated epoch
    curve.push_back(p);
    rows.push_back(line);
  }
  return rows;
}

// Fails early (before any training) when the directory cannot be written.
void prepare_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw FailedPreconditionError("checkpoint directory '" + dir + "': " + ec.message());
  const std::string probe = dir + "/.distribute-train-probe";
  {
    std::ofstream out(probe);
    if (!out) throw FailedPreconditionError("checkpoint directory '" + dir + "' is not writable");
  }
  std::filesystem::remove(probe, ec);
}

}  // namespace

StrategyKind parse_strategy_kind(std::string_view name) {
  if (name == "default") return StrategyKind::kDefault;
  if (name == "one_device") return StrategyKind::kOneDevice;
  if (name == "mirrored") return StrategyKind::kMirrored;
  if (name == "multi_worker") return StrategyKind::kMultiWorker;
  throw InvalidArgumentError("unknown strategy '" + std::string(name) +
                             "' (expected default, one_device, mirrored or multi_worker)");
}

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  throw InvalidArgumentError("unknown optimizer '" + std::string(name) + "' (expected sgd or adam)");
}

double TrainConfig::effective_learning_rate() const {
  if (learning_rate) return *learning_rate;
  return optimizer == OptimizerKind::kAdam ? 0.001 : 0.05;
}

void validate(const TrainConfig& config) {
  if (config.replicas < 1)
    throw InvalidArgumentError("--replicas must be >= 1, got " + std::to_string(config.replicas));
  if ((config.strategy == StrategyKind::kDefault || config.strategy == StrategyKind::kOneDevice) &&
      config.replicas != 1) {
    throw InvalidArgumentError("--strategy default and one_device have one replica, got --replicas " +
                               std::to_string(config.replicas));
  }
  if (config.batch_size < 1) {
    throw InvalidArgumentError("--batch-size must be >= 1, got " + std::to_string(config.batch_size));
  }
  if (config.epochs < 1) throw InvalidArgumentError("--epochs must be >= 1, got " + std::to_string(config.epochs));
  const double lr = config.effective_learning_rate();
  if (!(lr > 0) || !std::isfinite(lr)) {
    throw InvalidArgumentError("--learning-rate must be finite and > 0, got " + fmt_number(lr));
  }
  if (!(config.momentum >= 0 && config.momentum < 1)) {
    throw InvalidArgumentError("momentum must be in [0, 1), got " + fmt_number(config.momentum));
  }
  for (std::int64_t h : config.hidden) {
    if (h < 1) throw InvalidArgumentError("hidden layer sizes must be >= 1, got " + std::to_string(h));
  }
  if (config.resume && config.checkpoint_dir.empty()) {
    throw InvalidArgumentError("--resume needs --checkpoint-dir");
  }
  if (config.checkpoint_every_steps < 0) {
    throw InvalidArgumentError("--checkpoint-every must be >= 0, got " + std::to_string(config.checkpoint_every_steps));
  }
  if (config.checkpoint_every_steps > 0 && config.checkpoint_dir.empty()) {
    throw InvalidArgumentError("--checkpoint-every needs --checkpoint-dir");
  }
}

std::unique_ptr<Strategy> make_strategy(const TrainConfig& config) {
  std::vector<std::string> devices;
  for (int i = 0; i < config.replicas; ++i) devices.push_back("CPU:" + std::to_string(i));
  switch (config.strategy) {
    case StrategyKind::kDefault:
      return nullptr;  // the default strategy is a singleton: train() uses get_default_strategy()
    case StrategyKind::kOneDevice:
      return std::make_unique<OneDeviceStrategy>("CPU:0");
    case StrategyKind::kMirrored:
      return std::make_unique<MirroredStrategy>(devices);
    case StrategyKind::kMultiWorker: {
      MultiWorkerOptions options;
      options.local_devices = devices;
      return std::make_unique<MultiWorkerMirroredStrategy>(options);
    }
  }
  throw InvalidArgumentError("unknown strategy kind");
}

TrainResult train(const TrainConfig& config) {
  validate(config);
  std::unique_ptr<Strategy> strategy = make_strategy(config);
  return train(strategy ? *strategy : get_default_strategy(), config);
}

namespace {

// Where the run writes, checked before training (not after the first epoch).
void check_outputs(const TrainConfig& config) {
  if (!config.checkpoint_dir.empty()) prepare_checkpoint_dir(config.checkpoint_dir);
  if (!config.plot_path.empty()) {
    const std::filesystem::path parent = std::filesystem::absolute(config.plot_path).parent_path();
    if (!std::filesystem::is_directory(parent)) {
      throw FailedPreconditionError("cannot write the plot to '" + config.plot_path + "': no directory '" +
                                    parent.string() + "'");
    }
  }
}

// What a checkpoint holds besides the model and the optimizer: where the
// run is, so that a resumed run continues exactly where it stopped.
struct TrainingState {
  explicit TrainingState(std::uint64_t rng_seed) : seed(rng_seed) {}

  std::int64_t epoch = 0;           // epochs completed
  std::int64_t step = 0;            // optimizer steps taken
  std::int64_t input_position = 0;  // batches of the current epoch consumed
  std::uint64_t seed;
  // The current epoch's running sums (loss, correct, examples), so that a
  // run resumed in the middle of an epoch reports that whole epoch.
  Tensor epoch_sums = Tensor::zeros(DType::kFloat64, {3});

  void track(Checkpoint& checkpoint) {
    checkpoint.track("epoch", &epoch);
    checkpoint.track("step", &step);
    checkpoint.track("input_position", &input_position);
    checkpoint.track("rng_seed", &seed);
    checkpoint.track("epoch_sums", &epoch_sums);
  }
};

// The learning curve's CSV, opened for this run: a resumed run starts from
// the rows of the epochs it restored (appended to `curve`) and rewrites the
// file with just those, so that rows of epochs trained after the checkpoint
// are not repeated.
std::ofstream open_learning_curve(const std::string& path, int resumed_epochs, std::vector<CurvePoint>& curve) {
  std::vector<std::string> kept;
  if (resumed_epochs > 0) kept = read_curve(path, resumed_epochs, curve);
  std::ofstream csv(path, std::ios::trunc);
  if (!csv) throw FailedPreconditionError("cannot write the learning curve to '" + path + "'");
  csv << kCsvHeader << '\n';
  for (const std::string& row : kept) csv << row << '\n';
  csv << std::flush;
  return csv;
}

void append_curve_row(std::ofstream& csv, const std::string& path, const EpochStats& stats) {
  csv << stats.epoch << ',' << stats.loss << ',' << stats.accuracy << ',' << stats.test_accuracy << ','
      << stats.seconds << ',' << stats.samples_per_second << '\n'
      << std::flush;
  if (!csv) throw UnavailableError("writing the learning curve to '" + path + "' failed");
}

// The names of the variables whose replica copies are not bitwise equal.
std::vector<std::string> diverged(const std::vector<Variable>& variables) {
  std::vector<std::string> names;
  for (const Variable& v : variables) {
    const std::vector<Tensor> copies = v.values();
    for (const Tensor& copy : copies) {
      const auto a = copy.bytes(), b = copies.front().bytes();
      if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size()) != 0) {
        names.push_back(v.name());
        break;
      }
    }
  }
  return names;
}

// One training run: the model, the optimizer, the input and the checkpoint
// of train(strategy, config), set up (and resumed) by the constructor and
// trained by run(). Lives where it was made: the checkpoint tracks its
// members by address.
class TrainingRun {
 public:
  TrainingRun(Strategy& strategy, const TrainConfig& config)
      : strategy_(strategy),
        config_(config),
        chief_(strategy.is_chief()),
        log_(chief_ ? config.log : nullptr),
        state_(config.seed),
        checkpoint_({.max_to_keep = 3}) {
    validate(config_);
    if (chief_) check_outputs(config_);
    data_ = load_split(config_.data_path, config_.seed);
    make_model();
    global_batch_ = config_.batch_size;
    train_rows_ = data_.train_x.dim(0);
    if (config_.drop_remainder && global_batch_ > train_rows_) {
      throw InvalidArgumentError("--drop-remainder with --batch-size " + std::to_string(global_batch_) +
                                 " trains nothing: the training split has only " + std::to_string(train_rows_) +
                                 " rows");
    }
    // Every core runs a replica, so the input pipeline runs on the training
    // thread between steps (a shuffle of from_tensor_slices gathers each
    // batch in one pass) rather than on a prefetch thread competing with them.
    input_options_.experimental_per_replica_buffer_size = 0;
    input_.emplace(epoch_input(0));

    for (const Variable& p : params_) checkpoint_.track("model/" + p.name(), p);
    optimizer_->track(checkpoint_);
    state_.track(checkpoint_);
    checkpoint_.track("input", *input_);
    if (!config_.checkpoint_dir.empty()) watch_for_preemption();
    if (config_.resume) resume();

    // The learning curve so far (with the restored epochs' rows).
    if (!config_.csv_path.empty() && chief_) {
      csv_ = open_learning_curve(config_.csv_path, result_.resumed_from_epoch, curve_);
    }
    loss_scale_ = static_cast<float>(1.0 / static_cast<double>(global_batch_));
    steps_per_epoch_ = config_.drop_remainder ? train_rows_ / global_batch_
                                              : (train_rows_ + global_batch_ - 1) / global_batch_;
    if (config_.max_steps_per_epoch >= 0) steps_per_epoch_ = std::min(steps_per_epoch_, config_.max_steps_per_epoch);
    if (log_ != nullptr) {
      progress_.emplace(*log_, config_.interactive, config_.epochs, std::max<std::int64_t>(steps_per_epoch_, 1),
                        ProgressOptions{.columns = std::max(config_.columns, 20)});
    }
  }

  TrainResult run() {
    for (int e = static_cast<int>(state_.epoch); e < config_.epochs; ++e) {
      if (!train_epoch(e)) {
        result_.steps = state_.step;
        return result_;
      }
    }
    StrategyScope scope = strategy_.scope();
    result_.test_accuracy = evaluate(params_, data_);
    result_.steps = state_.step;
    result_.parameters = read_all(params_);
    std::vector<Variable> all = params_;
    for (const Variable& slot : optimizer_->slots()) all.push_back(slot);
    result_.diverged_variables = diverged(all);
    if (log_) *log_ << "test accuracy " << std::fixed << std::setprecision(4) << result_.test_accuracy << "\n";
    return result_;
  }

 private:
  // Model and optimizer state: mirrored variables (one copy per replica) of
  // aggregation NONE, as Keras's are: each replica updates its own copy.
  void make_model() {
    std::vector<std::int64_t> sizes{kInputs};
    sizes.insert(sizes.end(), config_.hidden.begin(), config_.hidden.end());
    sizes.push_back(kClasses);
    StrategyScope scope = strategy_.scope();
    params_ = make_parameters(sizes, config_.seed);
    optimizer_ = make_optimizer(config_, params_);
  }

  // The input of epoch e: its own seeded shuffle of the training rows (the
  // order depends on (seed, e) only), cut into global batches. Its iterator
  // is saved in the checkpoint (Checkpoint::track of a DistributedIterator):
  // a resumed run rebuilds the epoch's input and the restore brings the
  // iterator to where it was.
  DistributedIterator epoch_input(std::int64_t e) {
    const Dataset dataset = Dataset::from_tensor_slices({data_.train_x, data_.train_y})
                                .shuffle(train_rows_, epoch_seed(config_.seed, static_cast<int>(e)),
                                         /*reshuffle_each_iteration=*/false)
                                .batch(global_batch_, config_.drop_remainder);
    return strategy_.experimental_distribute_dataset(dataset, input_options_).make_iterator();
  }

  // A SIGTERM to any worker saves a checkpoint at the step all workers agree
  // on and ends the run (Preempted).
  void watch_for_preemption() {
    TerminationConfig termination;
    termination.termination_watcher_fn = config_.termination_watcher;
    termination.exit_fn = [this, code = termination.exit_code] {
      // (Only for the report: a directory that cannot be listed now
      // reports no path rather than replacing Preempted.)
      std::string saved;
      try {
        saved = latest_checkpoint(config_.checkpoint_dir).value_or("");
      } catch (const Error&) {
      }
      throw Preempted{saved, state_.step, code};
    };
    StrategyScope scope = strategy_.scope();
    preemption_.emplace(checkpoint_, config_.checkpoint_dir, termination, InitialRestore::kNone);
  }

  void resume() {
    // The chief's choice, on every worker: restoring is collective.
    const std::optional<std::string> latest = latest_checkpoint(config_.checkpoint_dir, strategy_);
    if (!latest) {
      if (log_) *log_ << "no checkpoint in " << config_.checkpoint_dir << ": starting from scratch\n";
      return;
    }
    // The saved epoch and seed first: the input to restore into is that
    // epoch's, and another seed is named as such (not as another pipeline).
    std::optional<std::int64_t> saved_epoch, saved_seed;
    try {
      for (const auto& [name, value] : load_checkpoint(*latest)) {
        if (name == "epoch" && value.num_elements() == 1) saved_epoch = value.data<std::int64_t>()[0];
        if (name == "rng_seed" && value.num_elements() == 1) saved_seed = value.data<std::int64_t>()[0];
      }
    } catch (const Error&) {
      // This worker cannot read the file: the restore below raises that
      // here and names this worker on the others. (Raising now would leave
      // them waiting in the restore's collective until its deadline.)
    }
    if (saved_seed && static_cast<std::uint64_t>(*saved_seed) != config_.seed) {
      throw FailedPreconditionError("checkpoint " + *latest + " was written with --seed " +
                                    std::to_string(static_cast<std::uint64_t>(*saved_seed)) + ", not " +
                                    std::to_string(config_.seed));
    }
    // (Also past config.epochs: a finished run resumed with as many epochs
    // restores, then trains nothing.)
    if (saved_epoch && *saved_epoch > 0) *input_ = epoch_input(*saved_epoch);
    StrategyScope scope = strategy_.scope();
    checkpoint_.restore(*latest);
    result_.resumed_from_epoch = static_cast<int>(state_.epoch);
    if (log_) *log_ << "resumed from " << *latest << " (epoch " << state_.epoch << ", step " << state_.step << ")\n";
  }

  // One replica's step (TF's step_fn): its slice of the global batch in,
  // [loss sum, correct, examples] of the slice out.
  Tensor step(const Element& batch) {
    ReplicaContext& ctx = current_replica_context();
    Pass pass = forward_backward(read_all(params_), batch[0], batch[1], loss_scale_, /*want_grads=*/true);
    // Each replica's gradient is of its loss sum / GLOBAL batch: their SUM
    // is the gradient of the global batch's mean loss.
    // Every replica gets the same bits, so every replica's optimizer step
    // below gives the same new weights.
    const std::vector<Tensor> grads = ctx.all_reduce(ReduceOp::SUM, std::move(pass.grads));
    optimizer_->apply(grads);
    return Tensor({pass.loss_sum, static_cast<double>(pass.correct), static_cast<double>(batch[0].dim(0))});
  }

  // Trains epoch e from where its input stands (a resumed epoch has taken
  // input_position of its steps); false when the run stops in it
  // (stop_after_steps).
  bool train_epoch(int e) {
    const auto start = std::chrono::steady_clock::now();
    const auto restored = state_.epoch_sums.data<double>();
    double loss_sum = restored[0], correct = restored[1], examples = restored[2];
    double examples_here = 0;  // examples trained by this run in this epoch
    while (state_.input_position < steps_per_epoch_) {
      const PerReplica<Element> batch = input_->get_next();
      PerReplica<Tensor> metrics = strategy_.run([this](const Element& b) { return step(b); }, batch);
      const Tensor total = strategy_.reduce(ReduceOp::SUM, metrics);
      const auto t = total.data<double>();
      loss_sum += t[0];
      correct += t[1];
      examples += t[2];
      examples_here += t[2];
      ++state_.step;
      ++state_.input_position;
      if (progress_ && progress_->interactive() && examples > 0) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress_->step(e + 1, std::min(state_.input_position, steps_per_epoch_), steps_per_epoch_,
                        loss_sum / examples, correct / examples, elapsed > 0 ? examples_here / elapsed : 0);
      }
      if (config_.checkpoint_every_steps > 0 && state_.step % config_.checkpoint_every_steps == 0) {
        state_.epoch_sums = Tensor({loss_sum, correct, examples});
        StrategyScope scope = strategy_.scope();
        checkpoint_.save(config_.checkpoint_dir);
      }
      if (preemption_) {
        state_.epoch_sums = Tensor({loss_sum, correct, examples});
        preemption_->save_checkpoint_if_preempted();
      }
      if (config_.stop_after_steps >= 0 && state_.step >= config_.stop_after_steps) return false;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state_.epoch = e + 1;
    state_.input_position = 0;
    *input_ = epoch_input(e + 1);  // what the epoch-end checkpoint saves
    state_.epoch_sums = Tensor::zeros(DType::kFloat64, {3});

    EpochStats stats;
    stats.epoch = e + 1;
    stats.loss = examples > 0 ? loss_sum / examples : 0;
    stats.accuracy = examples > 0 ? correct / examples : 0;
    stats.seconds = seconds;
    stats.samples_per_second = seconds > 0 ? examples_here / seconds : 0;
    end_epoch(stats);
    return true;
  }

  // The epoch's test accuracy, checkpoint and reports.
  void end_epoch(EpochStats& stats) {
    {
      StrategyScope scope = strategy_.scope();
      stats.test_accuracy = evaluate(params_, data_);
      if (!config_.checkpoint_dir.empty()) checkpoint_.save(config_.checkpoint_dir);
    }
    result_.history.push_back(stats);
    if (progress_) {
      progress_->end_epoch({.epoch = stats.epoch,
                            .epochs = config_.epochs,
                            .loss = stats.loss,
                            .accuracy = stats.accuracy,
                            .test_accuracy = stats.test_accuracy,
                            .samples_per_second = stats.samples_per_second,
                            .seconds = stats.seconds});
      *log_ << std::flush;
    }
    if (csv_.is_open()) append_curve_row(csv_, config_.csv_path, stats);
    curve_.push_back({stats.epoch, stats.loss, stats.accuracy, stats.test_accuracy});
    if (!config_.plot_path.empty() && chief_) write_learning_curve_png(config_.plot_path, curve_);
  }

  Strategy& strategy_;
  const TrainConfig& config_;
  const bool chief_;
  std::ostream* const log_;
  Split data_;
  std::vector<Variable> params_;
  std::unique_ptr<Optimizer> optimizer_;
  TrainingState state_;
  std::int64_t global_batch_ = 0;
  std::int64_t train_rows_ = 0;
  InputOptions input_options_;
  std::optional<DistributedIterator> input_;
  Checkpoint checkpoint_;
  TrainResult result_;
  std::optional<PreemptionCheckpointHandler> preemption_;
  std::vector<CurvePoint> curve_;
  std::ofstream csv_;
  float loss_scale_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  std::optional<Progress> progress_;
};

}  // namespace

TrainResult train(Strategy& strategy, const TrainConfig& config) {
  TrainingRun run(strategy, config);
  return run.run();
}

}  // namespace distribute::train
