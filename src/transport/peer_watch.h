// PeerWatch: notices at once that another worker's process ended, for
// workers that talk over MPI messages (issue 15).
//
// Open MPI does not report a peer that died in a way the library can catch:
// over shared memory its requests just never complete (a survivor learns of
// it at its collective deadline, 60 s by default), and over TCP its ob1
// layer ends the survivor's process when it meets the broken connection
// (often before mpirun ends the job). Workers that share the host's
// shared-memory segment watch each other's processes there (ShmChannel, a
// pidfd); the others keep one TCP connection per pair of workers instead,
// opened at start-up and idle afterwards. The kernel closes a process's
// sockets when it ends, however it ends (SIGKILL, a crash, the OOM killer),
// and the peer's side then reads end-of-file: MpiCrossWorker looks at the
// connections while it waits (once per round, before the round's MPI calls,
// when the workers span hosts; every 64 rounds on one host) and at the
// start of every collective (across hosts), raises UnavailableError naming
// the worker, and
// from then on makes no MPI call at all (any call that drives Open MPI's
// progress could meet the broken connection and end the process). A worker
// that fails writes its failure report on its connections too, and one
// that leaves in order (its strategy destroyed) one byte, so that the
// others can tell a report or a departure from a death. A host that
// vanishes without closing anything (power, a cut link) sends nothing: the
// collective deadline remains the bound for that.
//
// Which end-of-file a survivor reads first matters. A dying process's
// descriptors are closed in ascending order, so the connections move onto
// low descriptors reserved before MPI opened any (reserve_descriptors,
// called before MPI_Init), and their end-of-file reaches the survivors
// first. (When the program initialized MPI itself nothing is reserved and
// the race is lost more often; a worker that outlives its Open MPI daemon
// is ended by Open MPI, which closes its MPI connections before these.)
//
// Start-up: every worker listens on a port of its own (any address), and an
// all_gather (the caller's, over MPI) gives everyone each worker's port, its
// addresses (IPv4, up, not loopback; when OMPI_MCA_btl_tcp_if_include, or
// else OMPI_MCA_oob_tcp_if_include, is set, only the addresses inside the
// subnets or on the interfaces it names, those Open MPI was told to use;
// then 127.0.0.1 unless already there), its host name and pid, and worker
// 0's random token. Worker w connects to every lower worker, trying its
// addresses in order, while a thread accepts the higher ones; both ends
// check a hello carrying the token and both ranks (and the acceptor keeps a
// connection only once the connector acknowledges the answer), so a
// connection that
// reaches another job's or another namespace's port is dropped and the next
// address tried. All of it is bounded by the start-up deadline
// (DeadlineExceededError naming the workers not connected, and where this
// one tried to reach them).
//
// From the first PeerWatch on, the process has SIGPIPE ignored (set when
// its disposition was the default, as Python does for every program, and
// never restored): Open MPI's TCP transport writes to a dead peer's socket
// without MSG_NOSIGNAL, and the default action would end the survivor
// before it could raise. The descriptors are close-on-exec, and a child
// forked without exec (Python's multiprocessing, a data loader's workers)
// closes its copies at the fork (pthread_atfork): the worker's death is
// still seen while such a child lives, and the child's copy of a watch
// does nothing (no report, no leaving byte when its destructor runs). Not
// thread-safe: the owner serializes calls.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "distribute/internal/owner_process.h"

namespace distribute::internal {

class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // Gathers every worker's bytes, in worker order (an all_gather).
  using Exchange = std::function<std::vector<std::vector<std::byte>>(std::span<const std::byte>)>;

  enum class Kind { kEnded, kFailed, kLeft };
  struct Event {
    int worker = -1;
    Kind kind = Kind::kEnded;  // its connection closed / it reported a failure / it left in order
    std::string who;           // "worker 1 (pid 123, host h)"
    std::string report;        // kFailed: its report
  };

  // Connects `rank` with every other of `size` workers (size >= 2).
  static std::unique_ptr<PeerWatch> start(int rank, int size, const Exchange& exchange, Clock::time_point deadline);
  ~PeerWatch();  // leaves (see leave())
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // A worker whose connection closed without a word, or else one that
  // reported a failure, or else one that left, the lowest-numbered first;
  // nullopt when all are there. Does not block.
  std::optional<Event> check();
  // Tells the others this worker failed (once; best effort, never blocks).
  void report(const std::string& text) noexcept;
  // Tells the others this worker leaves in order, and closes (idempotent).
  void leave() noexcept;
  // Closes without a word, as a process that ended would (tests).
  void drop() noexcept;

  // Keeps n low descriptors (on /dev/null) for the connections of the
  // watches to come; call before MPI_Init.
  static void reserve_descriptors(int n);
  // The addresses a worker offers (see the header), for tests.
  static std::vector<std::uint32_t> local_addresses(const char* if_include);

 private:
  struct Peer {
    int fd = -1;
    std::string who;
    bool gone = false;     // nothing more to read
    Kind kind = Kind::kEnded;
    std::string inbox;     // what it wrote
  };
  explicit PeerWatch(std::vector<Peer> peers) : peers_(std::move(peers)) {}
  // True in a child forked from the process that started the watch (then
  // every call does nothing).
  bool forked() noexcept;

  std::vector<Peer> peers_;  // indexed by worker; this worker's entry unused
  OwnerProcess owner_;       // the process that started the watch
  bool reported_ = false;
  std::vector<pollfd> poll_fds_;  // check()'s, kept (it runs every round of a wait)
  std::vector<std::size_t> poll_which_;
};

}  // namespace distribute::internal
