// PeerWatch: notices at once that another worker's process ended, for
// workers that talk over a network (issue 15).
//
// Open MPI's TCP transport does not report a peer that died: its requests
// just never complete, so a survivor learns of it only at its collective
// deadline (60 s by default). Workers on one host watch each other's
// processes through the shared-memory segment (ShmChannel, a pidfd); workers
// on several hosts keep one TCP connection per pair of workers instead,
// opened at start-up and idle afterwards. The kernel closes a process's
// sockets when it ends, however it ends (SIGKILL, a crash, the OOM killer),
// and the peer's side of the connection then reads end-of-file: a
// survivor's wait polls its connections about once a millisecond and
// raises UnavailableError naming the worker. A worker that fails writes its
// failure report on its connections (the others may not be able to read
// MPI's any more: see below), and one that leaves in order (its strategy
// destroyed) one byte, so that the others can tell a report or a departure
// from a death. A host that vanishes without closing
// anything (power, a cut link) sends nothing: the collective deadline
// remains the bound for that.
//
// Start-up: every worker listens on a port of its own (any address), and an
// all_gather (the caller's, over MPI) gives everyone each worker's port, its
// addresses (IPv4, up, not loopback; when OMPI_MCA_btl_tcp_if_include, or
// else OMPI_MCA_oob_tcp_if_include, is set, only the addresses inside the
// subnets or on the interfaces it names, those Open MPI was told to use;
// 127.0.0.1 last), its
// host name and pid, and worker 0's random token. Worker w connects to every
// lower worker, trying its addresses in order, and accepts the higher
// ones; both ends check a hello carrying the token and both ranks, so a
// connection that reaches another job's or another namespace's port is
// dropped and the next address tried. All of it is bounded by the start-up
// deadline (DeadlineExceededError naming the workers not connected).
//
// Which end-of-file a survivor reads first matters: Open MPI's TCP
// transport meets its own broken connection inside MPI's progress and ends
// the process (ob1 aborts on a transport error), so the watch must see its
// end-of-file first. A dying process's descriptors are closed in ascending
// order, so the connections move onto low descriptors reserved before MPI
// opened any (reserve_descriptors, called before MPI_Init), and a waiting
// worker looks at them before every MPI progress call. (When the program
// initialized MPI itself, nothing is reserved and the race is lost more
// often: the job still ends, through Open MPI.)
//
// While it runs, a process that has a PeerWatch has SIGPIPE ignored (set
// when its disposition was the default, as Python does for every program):
// Open MPI's TCP transport writes to a dead peer's socket without
// MSG_NOSIGNAL, and the default action would end the survivor before it
// could raise. Not thread-safe: the owner serializes calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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
    std::string who;           // "worker 1 (host h, pid 123)"
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

  std::vector<Peer> peers_;  // indexed by worker; this worker's entry unused
  bool reported_ = false;
};

}  // namespace distribute::internal
