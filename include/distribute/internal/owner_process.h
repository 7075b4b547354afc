// OwnerProcess: the process that created an object. A child forked without
// exec (Python's os.fork and multiprocessing, a data loader's workers) gets
// a copy of every object of its parent but none of its other threads, and
// shares its parent's files, sockets and shared memory. An object that owns
// threads, locks or speaks for the worker (a strategy, MPI, the
// shared-memory segment, the process watch, a prefetching iterator) checks
// forked_child():
//   - in its destructor, where such a child does nothing of its parent's
//     (no join of threads that do not exist in it, no lock another thread
//     may have held at the fork, no message to the other workers on the
//     parent's behalf: its state is left, not destroyed);
//   - where it would wait for its threads or its peers, which raises
//     FailedPreconditionError in such a child instead of waiting forever.
// The check is one relaxed load: the process counts the forks it came out
// of (a pthread_atfork child handler, registered when the library is
// loaded; getpid() comparisons if that registration failed). A child made
// without fork()'s handlers (_Fork, a raw clone or SYS_fork) is not told
// apart.
#pragma once

#include <cstdint>

namespace distribute::internal {

class OwnerProcess {
 public:
  OwnerProcess() noexcept;

  // True in a child forked (at any depth) from the process that created this
  // object.
  bool forked_child() const noexcept;

  // True in a process forked (without exec) from another that had loaded
  // this library.
  static bool process_was_forked() noexcept;

 private:
  std::uint32_t forks_;  // the creating process's fork count
  int pid_;              // and its id
};

}  // namespace distribute::internal
