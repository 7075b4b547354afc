// A mutex that clang's thread-safety analysis understands, and the macros
// that say what it guards. `GUARDED_BY(mu_)` on a member makes every access
// without mu_ held a compile error under `-Wthread-safety` (the
// thread-safety preset, clang, run by scripts/test.sh); under g++ the
// macros vanish and Mutex is a std::mutex. libstdc++'s std::mutex carries no
// capability attributes, hence the wrapper.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void add() { MutexLock lock(mu_); ++count_; }
//   void add_locked() REQUIRES(mu_) { ++count_; }
//
// Condition variables wait on MutexLock::native() (a std::unique_lock);
// the analysis treats the wait as holding the mutex throughout, which is
// what the code after the wait may assume.
#pragma once

#include <mutex>

#if defined(__clang__)
#define DISTRIBUTE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DISTRIBUTE_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) DISTRIBUTE_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY DISTRIBUTE_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) DISTRIBUTE_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) DISTRIBUTE_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) DISTRIBUTE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) DISTRIBUTE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) DISTRIBUTE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define EXCLUDES(...) DISTRIBUTE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) DISTRIBUTE_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS DISTRIBUTE_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace distribute::internal {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }
  // For MutexLock (condition variables wait on a std::unique_lock of it).
  std::mutex& native() noexcept { return mutex_; }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for its scope (std::unique_lock for the analysis).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) ACQUIRE(mutex) : lock_(mutex.native()) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  // Releases early (the destructor then does nothing) or takes it again.
  void unlock() RELEASE() { lock_.unlock(); }
  void lock() ACQUIRE() { lock_.lock(); }
  // What std::condition_variable::wait takes.
  std::unique_lock<std::mutex>& native() noexcept { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace distribute::internal
