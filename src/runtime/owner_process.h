// OwnerProcess: the process that created an object. A child forked without
// exec (Python's os.fork and multiprocessing, a data loader's workers) gets
// a copy of every object of its parent but none of its other threads, and
// shares its parent's files, sockets and shared memory: an object that
// owns threads or speaks for the worker (MPI, the shared-memory segment,
// the process watch) checks forked_child() in its destructor and does
// nothing there in such a child (no join of threads that do not exist in
// it, no message to the other workers on the parent's behalf).
#pragma once

#include <sys/types.h>
#include <unistd.h>

namespace distribute::internal {

class OwnerProcess {
 public:
  // True in a child forked from the process that created this object.
  bool forked_child() const noexcept { return ::getpid() != pid_; }

 private:
  pid_t pid_ = ::getpid();
};

}  // namespace distribute::internal
