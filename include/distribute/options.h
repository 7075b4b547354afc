// Options of collective operations (TF's tf.distribute.experimental.CommunicationOptions).
#pragma once

#include <cstdint>
#include <optional>

namespace distribute {

enum class CommunicationImplementation { AUTO, RING, NCCL };

// How a strategy runs its local replicas (not a TF option: TF runs replicas
// as threads).
enum class ReplicaExecution {
  // One thread per replica (the caller's thread runs replica 0).
  THREADS,
  // When replicas outnumber the cores this process may use: one thread per
  // core, the replicas running on them as fibers (user-level contexts) that
  // switch only inside the library's waits, so replicas that meet in a
  // collective do not pay the kernel's wake-ups. Replica functions must meet
  // only through the library (a replica blocked on a lock or barrier of its
  // own would block the replicas that share its thread), thread-local
  // variables are shared by the replicas of a thread, and a replica must not
  // call a collective inside a catch block (the runtime's record of handled
  // exceptions is per thread). With no more replicas than cores, the same as
  // THREADS.
  FIBERS,
};

struct CommunicationOptions {
  // all_reduce of a list packs consecutive tensors into reductions of at most
  // this many bytes each (a single tensor larger than that is its own pack);
  // 0 puts the whole list in one reduction. Negative: InvalidArgumentError.
  std::int64_t bytes_per_pack = 0;
  // How long a collective waits for the other replicas before raising
  // DeadlineExceededError on every waiting replica. Unset: the strategy's
  // default (60 s unless the strategy was built with other options).
  // Must be > 0 when set; infinity (or any value too large for the clock)
  // means no deadline: the wait ends when every replica arrives, one fails,
  // or the wait is cancelled (interrupt.h).
  std::optional<double> timeout_seconds = std::nullopt;
  // A hint; in-process replicas always use the shared-memory engine.
  CommunicationImplementation implementation = CommunicationImplementation::AUTO;

  // `other`'s fields that are set (bytes_per_pack != 0, timeout_seconds set,
  // implementation != AUTO) override this one's (TF's Options.merge).
  CommunicationOptions merge(const CommunicationOptions& other) const {
    CommunicationOptions out = *this;
    if (other.bytes_per_pack != 0) out.bytes_per_pack = other.bytes_per_pack;
    if (other.timeout_seconds.has_value()) out.timeout_seconds = other.timeout_seconds;
    if (other.implementation != CommunicationImplementation::AUTO) out.implementation = other.implementation;
    return out;
  }
};

}  // namespace distribute
