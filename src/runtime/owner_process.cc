#include "distribute/internal/owner_process.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace distribute::internal {
namespace {

// How many forks separate this process from the program's first one. Only a
// child's handler writes it, while the child has a single thread.
constinit std::atomic<std::uint32_t> process_forks{0};
// Whether the handler is registered (pthread_atfork can fail: ENOMEM).
constinit std::atomic<bool> counting{false};

void count_fork_in_child() noexcept { process_forks.fetch_add(1, std::memory_order_relaxed); }

bool register_fork_counter() noexcept {
  static constinit std::atomic<bool> tried{false};
  if (!tried.exchange(true)) {
    counting.store(::pthread_atfork(nullptr, nullptr, count_fork_in_child) == 0, std::memory_order_release);
  }
  return true;
}

// At load, before any thread of the program can fork; again (a no-op) by
// the first OwnerProcess, in case one is built during another file's
// static initialization.
[[maybe_unused]] const bool registered_at_load = register_fork_counter();

}  // namespace

OwnerProcess::OwnerProcess() noexcept {
  register_fork_counter();
  forks_ = process_forks.load(std::memory_order_relaxed);
  pid_ = ::getpid();
}

bool OwnerProcess::forked_child() const noexcept {
  if (counting.load(std::memory_order_relaxed)) return process_forks.load(std::memory_order_relaxed) != forks_;
  return ::getpid() != pid_;  // (a system call: only when registration failed)
}

bool OwnerProcess::process_was_forked() noexcept { return process_forks.load(std::memory_order_relaxed) != 0; }

}  // namespace distribute::internal
