// How many CPUs this process may use: the one place that counts them.
//
// std::thread::hardware_concurrency() counts the machine's CPUs. A process
// may be allowed fewer: its affinity mask (taskset, numactl, mpirun's
// binding, a container's cpuset) lists the CPUs it may run on, and a cgroup
// CPU quota (cgroup v2 cpu.max; v1 cpu.cfs_quota_us / cpu.cfs_period_us, what
// `docker run --cpus 2` and Kubernetes CPU limits set) caps the CPU time it
// gets per period, whatever the number of CPUs it runs on. usable_cores() is
// the smaller of the two: MirroredStrategy()'s default replica count, the
// spin-or-yield decision of waiting replicas, Dataset::map's kAutotune
// parallelism, distribute-train's default --replicas.
//
// The parsing takes the files' contents (and the cgroup file system's root
// directory) as arguments, so that tests feed it any text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace distribute::internal {

// CPUs a cgroup v2 cpu.max allows: "<quota> <period>" in microseconds gives
// ceil(quota / period), at least 1. "max <period>" (no quota) and malformed
// text (not two tokens, non-numbers, a zero quota or period) give nullopt.
std::optional<unsigned> parse_cgroup_v2_cpu_max(std::string_view contents);

// The same for cgroup v1: the contents of cpu.cfs_quota_us and
// cpu.cfs_period_us. A quota of -1 (no quota) and malformed text give
// nullopt.
std::optional<unsigned> parse_cgroup_v1_cfs(std::string_view quota_us, std::string_view period_us);

// The CPU quota, in CPUs, of a process whose /proc/self/cgroup reads
// `proc_self_cgroup`, with the cgroup file systems mounted under `root`
// (normally /sys/fs/cgroup). Every level from the process's cgroup up to the
// root counts (a parent's quota also limits its children); the smallest
// wins. cgroup v2 is looked up under root and root/unified (the hybrid
// layout), v1's cpu controller under root/<its controller list> and
// root/cpu. Levels whose directory or files are missing or unreadable are
// skipped, so a container whose cgroup is mounted as the root (a cgroup
// namespace, or /proc/self/cgroup naming the host's path) finds its quota at
// the root. nullopt when no level sets a quota.
std::optional<unsigned> cgroup_cpu_limit(std::string_view proc_self_cgroup, const std::filesystem::path& root);

// cgroup_cpu_limit() of this process (/proc/self/cgroup, /sys/fs/cgroup),
// read once and cached for the life of the process.
std::optional<unsigned> process_cgroup_cpu_limit() noexcept;

// CPUs in the calling thread's affinity mask; hardware_concurrency() (at
// least 1) if the mask cannot be read.
unsigned affinity_cpu_count() noexcept;

// min(affinity_cpu_count(), process_cgroup_cpu_limit()), at least 1. The
// mask is read on every call (a thread pinned after startup counts its new
// mask); the quota is cached.
unsigned usable_cores() noexcept;

// The count of runnable threads in /proc/loadavg's fourth field
// ("running/total"); nullopt for text without one.
std::optional<unsigned> parse_loadavg_running(std::string_view loadavg) noexcept;

// Whether every runnable thread of the system has a CPU: no more runnable
// threads (the caller counts) than online CPUs, from /proc/loadavg (about
// 10 us of system calls). False when it cannot be read. For a spin that
// would otherwise keep a core from a waiting thread: ReplicaPool's idle
// threads ask it before spinning past their base window. Both counts are
// the machine's: inside a cpuset or CPU quota smaller than the machine, a
// crowd on the process's own CPUs can go unseen.
bool runnable_threads_fit_cpus() noexcept;

}  // namespace distribute::internal
