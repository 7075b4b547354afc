// How MultiWorkerMirroredStrategy objects begin and end, under mpirun
// (run_lifecycle.sh launches it and counts the workers' verdicts). Each
// worker prints "worker <w>: PASS <mode>" or "worker <w>: FAIL <mode>: why".
//   sequence      three strategies one after the other, each with collectives,
//                 reduce and a distributed dataset: all work (a finished
//                 strategy's leaving notice is never read by the next one);
//                 a dataset kept beyond its strategy raises
//                 FailedPreconditionError instead of talking to the next one.
//   two_alive     a second strategy while the first lives: FailedPreconditionError
//                 at construction, on every worker; the first keeps working.
//   skip <m> [s]  worker m skips the second of two all_reduces (and waits);
//                 every other worker raises DeadlineExceededError naming
//                 exactly worker m (or UnavailableError carrying the
//                 message of a peer whose deadline came first). With s = "small" a 4-byte tensor, else
//                 a 1 MiB one (the other algorithm).
//   late          worker 1 starts 6 s late, the library initializes MPI:
//                 worker 0 raises DeadlineExceededError by its 2 s start-up
//                 timeout (MPI's initialization cannot name the late one).
//   late_hello    the same with MPI initialized by the program at once:
//                 worker 0 raises DeadlineExceededError naming worker 1.
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "distribute/distribute.h"

namespace dist = distribute;

namespace {

using Clock = std::chrono::steady_clock;

int g_rank = -1;

int launcher_rank() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (r == nullptr) r = std::getenv("PMI_RANK");
  return r == nullptr ? -1 : std::atoi(r);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int verdict(bool ok, const std::string& mode, const std::string& why = "") {
  std::cout << "worker " << g_rank << ": " << (ok ? "PASS " : "FAIL ") << mode << (ok || why.empty() ? "" : ": " + why)
            << std::endl;
  return ok ? 0 : 1;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One round: collectives, reduce and a distributed dataset.
std::string use(dist::MultiWorkerMirroredStrategy& s) {
  const auto sums = s.run([] {
    return dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, dist::Tensor{1.f, 2.f});
  });
  const float n = static_cast<float>(s.num_replicas_in_sync());
  if (!(sums[0] == dist::Tensor{n, 2 * n})) return "all_reduce gave " + sums[0].to_string();
  // range(16) in global batches of 4: every step's sum over all replicas.
  std::int64_t total = 0;
  for (const auto& step : s.experimental_distribute_dataset(dist::Dataset::range(16).batch(4))) {
    total += s.reduce(dist::ReduceOp::SUM, step, 0).data<std::int64_t>()[0];
  }
  if (total != 120) return "the distributed dataset summed to " + std::to_string(total) + ", expected 120";
  return "";
}

int sequence() {
  std::optional<dist::DistributedDataset> kept;
  for (int round = 0; round < 3; ++round) {
    dist::MultiWorkerOptions options;
    options.communication.timeout_seconds = 20;
    dist::MultiWorkerMirroredStrategy s(options);
    const std::string problem = use(s);
    if (!problem.empty()) return verdict(false, "sequence", "round " + std::to_string(round) + ": " + problem);
    if (round == 2) kept = s.experimental_distribute_dataset(dist::Dataset::range(8).batch(4));
  }
  // The last strategy's dataset, after its strategy ended (kept from the
  // last round, so that every earlier round's channels were freed and could
  // be reused by the next: the case of the bug).
  try {
    for (const auto& step : *kept) (void)step;
    return verdict(false, "sequence", "a dataset of a destroyed strategy was iterated");
  } catch (const dist::FailedPreconditionError& e) {
    if (!contains(e.what(), "was destroyed")) return verdict(false, "sequence", e.what());
  }
  return verdict(true, "sequence");
}

int two_alive() {
  dist::MultiWorkerMirroredStrategy first;
  try {
    dist::MultiWorkerMirroredStrategy second;
    return verdict(false, "two_alive", "the second strategy was created");
  } catch (const dist::FailedPreconditionError& e) {
    if (!contains(e.what(), "another MultiWorkerMirroredStrategy")) return verdict(false, "two_alive", e.what());
  }
  const std::string problem = use(first);
  return verdict(problem.empty(), "two_alive", problem);
}

int skip(int missing, bool small) {
  dist::MultiWorkerOptions options;
  options.communication.timeout_seconds = 3;
  dist::MultiWorkerMirroredStrategy s(options);
  const dist::Tensor value = small ? dist::Tensor{1.f} : dist::Tensor(std::vector<float>(1 << 18, 1.f), dist::Shape{1 << 18});
  s.run([&] { dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, value); });
  if (s.worker_index() == missing) {
    // Skips the call, and stays away until the others gave up (the job may
    // end meanwhile: they abort it).
    verdict(true, "skip");
    std::this_thread::sleep_for(std::chrono::seconds(6));
    return 0;
  }
  const auto start = Clock::now();
  try {
    s.run([&] { dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, value); });
    return verdict(false, "skip", "the all_reduce without worker " + std::to_string(missing) + " completed");
  } catch (const dist::Error& e) {
    // Its own deadline, or the report of a peer whose deadline came first
    // (UnavailableError carrying that peer's message): either way naming
    // exactly the missing worker.
    const std::string expected = "nothing received from worker(s) [" + std::to_string(missing) + "]";
    std::cout << "worker " << g_rank << ": " << e.what() << std::endl;
    if (e.code() != dist::ErrorCode::kDeadlineExceeded && e.code() != dist::ErrorCode::kUnavailable) {
      return verdict(false, "skip", "expected DeadlineExceededError or UnavailableError");
    }
    if (!contains(e.what(), expected)) return verdict(false, "skip", "expected \"" + expected + "\"");
    if (!contains(e.what(), "all_reduce #1")) return verdict(false, "skip", "expected the user's number all_reduce #1");
    if (seconds_since(start) > 10) return verdict(false, "skip", "raised after " + std::to_string(seconds_since(start)));
    return verdict(true, "skip");
  } catch (const std::exception& e) {
    return verdict(false, "skip", std::string("unexpected error: ") + e.what());
  }
}

int late(bool program_initializes) {
  if (program_initializes) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  if (g_rank == 1) std::this_thread::sleep_for(std::chrono::seconds(6));
  dist::MultiWorkerOptions options;
  options.startup_timeout_seconds = 2;
  options.communication.timeout_seconds = 30;
  const std::string mode = program_initializes ? "late_hello" : "late";
  const auto start = Clock::now();
  try {
    dist::MultiWorkerMirroredStrategy s(options);
    if (g_rank == 0) return verdict(false, mode, "worker 0's strategy was created without worker 1");
    return 0;  // the late worker: its peer has given up
  } catch (const dist::DeadlineExceededError& e) {
    const double waited = seconds_since(start);
    std::cout << "worker " << g_rank << ": after " << waited << " s: " << e.what() << std::endl;
    if (g_rank != 0) return 0;
    const std::string expected = program_initializes ? "worker(s) [1] did not arrive" : "MPI_Init_thread";
    int code = verdict(contains(e.what(), expected) && waited >= 1.9 && waited < 5, mode,
                       "expected \"" + expected + "\" after 2 to 5 s");
    // A non-zero status ends the job (the late worker's MPI cannot meet a
    // peer that gave up).
    return code == 0 ? 3 : code;
  } catch (const std::exception& e) {
    return verdict(false, mode, std::string("unexpected error: ") + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  g_rank = launcher_rank();
  try {
    if (mode == "sequence") return sequence();
    if (mode == "two_alive") return two_alive();
    if (mode == "skip" && argc > 2) return skip(std::atoi(argv[2]), argc > 3 && std::string(argv[3]) == "small");
    if (mode == "late") return late(false);
    if (mode == "late_hello") return late(true);
  } catch (const std::exception& e) {
    return verdict(false, mode, std::string("unexpected error: ") + e.what());
  }
  std::cerr << "usage: multi_worker_lifecycle sequence|two_alive|skip <m> [small]|late|late_hello\n";
  return 2;
}
