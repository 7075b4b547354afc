// distribute-train: data-parallel training of an MLP on the handwritten
// digits with tf.distribute's programming model (see trainer.h).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "distribute/strategies.h"
#include "progress.h"
#include "trainer.h"

namespace train = distribute::train;

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel MLP training on the handwritten-digits data set (tf.distribute in C++)",
               "distribute-train"};
  train::TrainConfig config;
  config.log = &std::cout;
  // MirroredStrategy over every CPU this process may use (the affinity mask,
  // capped by a cgroup CPU quota) unless told otherwise.
  config.replicas = distribute::usable_cpu_count();
  std::string strategy = "mirrored";
  std::string optimizer = "sgd";
  double learning_rate = 0;
  app.add_option("--strategy", strategy, "default | one_device | mirrored | multi_worker")->capture_default_str();
  app.add_option("--replicas,--threads", config.replicas,
                 "replicas of this process, one thread each (default: one per usable CPU, affinity mask and cgroup "
                 "quota; 1 for default and one_device)")
      ->capture_default_str();
  app.add_option("--epochs", config.epochs, "epochs to train (in total, counting restored ones)")
      ->capture_default_str();
  app.add_option("--batch-size", config.batch_size, "global batch size, split across the replicas")
      ->capture_default_str();
  app.add_flag("--drop-remainder", config.drop_remainder,
               "skip each epoch's last batch when it is partial (TF's batch(drop_remainder=True))");
  auto* lr_option =
      app.add_option("--learning-rate", learning_rate, "learning rate (default: 0.05 for sgd, 0.001 for adam)");
  app.add_option("--optimizer", optimizer, "sgd (momentum 0.9) | adam")->capture_default_str();
  app.add_option("--momentum", config.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--seed", config.seed, "seed of the initialization, the split and the data order")
      ->capture_default_str();
  app.add_option("--hidden", config.hidden, "hidden layer sizes")->capture_default_str()->delimiter(',');
  app.add_option("--data", config.data_path, "digits CSV (default: the shipped data/digits.csv)");
  app.add_option("--checkpoint-dir", config.checkpoint_dir,
                 "save a checkpoint there after every epoch, and on SIGTERM (then exit with status 42)");
  app.add_option("--checkpoint-every", config.checkpoint_every_steps,
                 "also save a checkpoint every N steps, mid-epoch (0: only at the ends of epochs)")
      ->capture_default_str();
  app.add_flag("--resume", config.resume, "restore the latest checkpoint of --checkpoint-dir and continue");
  app.add_option("--csv", config.csv_path, "write the learning curve (one row per epoch) to this file");
  app.add_option("--plot", config.plot_path, "draw the learning curve as a PNG to this file (after every epoch)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "distribute-train: " << e.what() << " (see --help)\n";
    return 2;
  }

  config.interactive = train::is_terminal(stdout);
  config.columns = train::terminal_columns(stdout);
  try {
    config.strategy = train::parse_strategy_kind(strategy);
    config.optimizer = train::parse_optimizer_kind(optimizer);
    if (lr_option->count() > 0) config.learning_rate = learning_rate;
    if (config.strategy == train::StrategyKind::kDefault || config.strategy == train::StrategyKind::kOneDevice) {
      if (app.count("--replicas") == 0) config.replicas = 1;
    }
    train::train(config);
  } catch (const train::Preempted& p) {
    // Every worker saved (the chief wrote the file) and ends here.
    std::cerr << "distribute-train: preempted (SIGTERM): saved " << p.checkpoint << " at step " << p.step
              << "; run the same command with --resume to continue (exit status " << p.exit_code << ")\n";
    return p.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "distribute-train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
