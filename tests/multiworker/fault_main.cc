// A 2-worker job in which worker 1 fails in one of three ways before an
// all_reduce, while worker 0 waits in it (run_fault.sh launches it under
// mpirun and checks the output, the exit status and the time):
//   throw  worker 1's replica throws: worker 0 raises UnavailableError naming
//          worker 1 at once (the failure is reported);
//   stuck  worker 1 sleeps past the collective timeout (2 s): worker 0 raises
//          DeadlineExceededError naming worker 1;
//   kill   worker 1 is killed (SIGKILL): the job ends with a non-zero status
//          (mpirun, or worker 0's deadline, whichever comes first);
//   kill_forked  as kill, after every worker forked a child (no exec) that
//          outlives worker 1 by 5 s: the child holds copies of its parent's
//          files, and worker 1's death must still be seen (run_fault.sh
//          kill_detect_forked);
//   exit   worker 1's program ends early (its strategy is destroyed): worker
//          0 raises UnavailableError naming worker 1 at once.
//   loop   any number of workers: after printing "worker <w>: ready
//          (segment yes|no) pid <pid>", every worker runs an all_reduce every 2 ms
//          for up to 60 s (collective timeout 3 s) until one raises; the
//          network tests (tests/net/run_net.sh) cut a host's link or kill
//          its processes meanwhile. `loop stop_before_hand_off`: worker 1
//          stops itself (SIGSTOP) in its 200th hierarchical all_reduce,
//          past its host's sum and before it joins the hand-off of its
//          leader's result (a window a signal from outside hits by chance).
// A second argument `shared` makes the failing step's all_reduce an in-place
// one of a 1 MiB block from experimental_allocate_shared (the segment's
// in-place path, whose waits must end the same ways).
// Worker 0 prints "worker 0: <ErrorType> after <ms> ms: <message>" (in loop
// mode every worker does, <ms> counted from the start of the all_reduce that
// raised).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "distribute/distribute.h"
#include "testing/shared_memory.h"
#include "transport/fault_point.h"

namespace dist = distribute;

namespace {

using distribute::testing::segment_mapped;

int loop(bool stop_before_hand_off) {
  dist::MultiWorkerOptions options;
  options.communication.timeout_seconds = 3.0;
  dist::MultiWorkerMirroredStrategy strategy(options);
  const int w = strategy.worker_index();
  if (stop_before_hand_off && w == 1) {
    dist::internal::set_fault_hook(dist::internal::FaultPoint::kBeforeHostHandOff, [] {
      static std::atomic<int> passes{0};
      if (++passes == 200) std::raise(SIGSTOP);
    });
  }
  strategy.run([] { dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, dist::Tensor{1.f}); });
  std::cout << "worker " << w << ": ready (segment " << (segment_mapped() ? "yes" : "no") << ") pid " << ::getpid()
            << std::endl;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const float expected = static_cast<float>(strategy.num_replicas_in_sync());
  while (std::chrono::steady_clock::now() < end) {
    const auto start = std::chrono::steady_clock::now();
    try {
      auto out = strategy.run(
          [] { return dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, dist::Tensor{1.f}); });
      if (strategy.experimental_local_results(out)[0].data<float>()[0] != expected) {
        std::cout << "worker " << w << ": wrong sum" << std::endl;
        return 1;
      }
    } catch (const dist::Error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      std::cout << "worker " << w << ": " << dist::error_code_name(e.code()) << " after " << ms.count()
                << " ms: " << e.what() << std::endl;
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::cout << "worker " << w << ": no error in 60 s" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "stuck" && mode != "kill" && mode != "kill_forked" && mode != "exit" &&
      mode != "loop") {
    std::cerr << "usage: multi_worker_fault throw|stuck|kill|kill_forked|exit [shared] | loop [stop_before_hand_off]\n";
    return 2;
  }
  if (mode == "loop") {
    const std::string option = argc > 2 ? argv[2] : "";
    if (!option.empty() && option != "stop_before_hand_off") {
      std::cerr << "multi_worker_fault loop: expected no option or stop_before_hand_off, got " << option << "\n";
      return 2;
    }
    return loop(option == "stop_before_hand_off");
  }
  const bool forked = mode == "kill_forked";
  const std::string mode_after_fork = forked ? "kill" : mode;
  dist::MultiWorkerOptions options;
  options.communication.timeout_seconds = mode_after_fork == "kill" ? 10.0 : 2.0;
  auto owned = std::make_unique<dist::MultiWorkerMirroredStrategy>(options);
  dist::MultiWorkerMirroredStrategy& strategy = *owned;
  // One collective that works, so that both workers are past start-up.
  strategy.run([] { dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, dist::Tensor{1.f}); });
  const int w = strategy.worker_index();
  if (forked && ::fork() == 0) {
    // The child: off the job's output (mpirun's pipes), alive 5 s, then gone
    // without running anything of its parent's.
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    ::_exit(0);
  }
  if (mode == "exit" && w == 1) {
    owned.reset();
    std::cout << "worker 1: left" << std::endl;
    return 0;
  }
  const bool shared = argc > 2 && std::string(argv[2]) == "shared";
  constexpr std::int64_t kShared = 1 << 18;  // floats: 1 MiB
  const std::shared_ptr<std::byte> block =
      shared ? strategy.experimental_allocate_shared(kShared * sizeof(float))[0] : nullptr;
  const auto start = std::chrono::steady_clock::now();
  try {
    strategy.run([&] {
      if (w == 1) {
        if (mode == "throw") throw std::runtime_error("boom in the training step");
        if (mode == "stuck") std::this_thread::sleep_for(std::chrono::seconds(30));
        if (mode_after_fork == "kill") std::raise(SIGKILL);
      }
      if (shared) {
        dist::Tensor t = dist::Tensor::wrap(dist::DType::kFloat32, dist::Shape{kShared}, block.get(),
                                            std::make_shared<std::shared_ptr<std::byte>>(block), /*writable=*/true);
        t = dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, std::move(t));
      } else {
        dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, dist::Tensor{2.f});
      }
    });
    std::cout << "worker " << w << ": no error" << std::endl;
  } catch (const dist::Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    std::cout << "worker " << w << ": " << dist::error_code_name(e.code()) << " after " << ms.count()
              << " ms: " << e.what() << std::endl;
  } catch (const std::exception& e) {
    std::cout << "worker " << w << ": exception: " << e.what() << std::endl;
  }
  return 0;
}
