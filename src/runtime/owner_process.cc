#include "distribute/internal/owner_process.h"

#include <pthread.h>

#include <atomic>

namespace distribute::internal {
namespace {

// How many forks separate this process from the program's first one. Only a
// child's handler writes it, while the child has a single thread.
constinit std::atomic<std::uint32_t> process_forks{0};

void count_fork_in_child() noexcept { process_forks.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

OwnerProcess::OwnerProcess() noexcept {
  // Registered before the first object that needs it exists: a fork before
  // that leaves nothing to tell apart.
  [[maybe_unused]] static const int registered = ::pthread_atfork(nullptr, nullptr, count_fork_in_child);
  forks_ = process_forks.load(std::memory_order_relaxed);
}

bool OwnerProcess::forked_child() const noexcept {
  return process_forks.load(std::memory_order_relaxed) != forks_;
}

}  // namespace distribute::internal
