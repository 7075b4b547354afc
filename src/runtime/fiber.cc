#include "runtime/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cassert>
#include <new>
#include <system_error>
#include <utility>

// g++ defines __SANITIZE_*__; clang tells through __has_feature.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define DISTRIBUTE_TSAN_FIBERS 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define DISTRIBUTE_ASAN_FIBERS 1
#endif

namespace distribute::internal {
namespace {

namespace ctx = boost::context;

// A stack mapped once and reused by every run: Boost.Context builds each
// run's fiber at its top and "deallocates" it (a no-op) when the fiber ends.
class Stack {
 public:
  explicit Stack(std::size_t bytes) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + page - 1) / page * page + page;  // + the guard page
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                   -1, 0);
    if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap of a fiber stack");
    base_ = static_cast<char*>(p);
    // The lowest page faults on overflow instead of writing below the stack.
    mprotect(base_, page, PROT_NONE);
    guard_ = page;
  }
  ~Stack() { munmap(base_, size_); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;

  char* bottom() const noexcept { return base_ + guard_; }
  std::size_t usable() const noexcept { return size_ - guard_; }

 private:
  char* base_ = nullptr;
  std::size_t size_ = 0;
  std::size_t guard_ = 0;
};

// Boost.Context's StackAllocator over a Stack.
struct StackRef {
  Stack* stack;
  ctx::stack_context allocate() {
    ctx::stack_context sc;
    sc.size = stack->usable();
    sc.sp = stack->bottom() + stack->usable();
    return sc;
  }
  void deallocate(ctx::stack_context&) noexcept {}
};

thread_local void* t_local = nullptr;

}  // namespace

struct FiberThread::Fiber {
  int replica = 0;
  std::unique_ptr<Stack> stack;
  ctx::fiber self;  // the suspended fiber, while it is not running
  bool done = true;
  void* local = nullptr;  // its fiber_local() while suspended
#if DISTRIBUTE_TSAN_FIBERS
  void* tsan = nullptr;
#endif
#if DISTRIBUTE_ASAN_FIBERS
  void* fake_stack = nullptr;  // ASan's fake stack of the suspended fiber
#endif
};

struct FiberThread::State {
  std::vector<Fiber> fibers;
  FunctionRef<void(int)>* task = nullptr;
  Fiber* running = nullptr;
  ctx::fiber scheduler;  // the scheduler, while a fiber runs
  std::size_t live = 0;  // fibers that have not returned
  void* thread_local_saved = nullptr;
#if DISTRIBUTE_TSAN_FIBERS
  void* tsan_scheduler = nullptr;
#endif
#if DISTRIBUTE_ASAN_FIBERS
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_bottom = nullptr;
  std::size_t scheduler_size = 0;
#endif

  // Both sides of a switch: the scheduler resuming a fiber, a fiber giving
  // the thread back (`finishing` when it returned).
  void enter(Fiber& f) {
    running = &f;
    thread_local_saved = t_local;
    t_local = f.local;
#if DISTRIBUTE_TSAN_FIBERS
    __tsan_switch_to_fiber(f.tsan, 0);
#endif
#if DISTRIBUTE_ASAN_FIBERS
    __sanitizer_start_switch_fiber(&scheduler_fake_stack, f.stack->bottom(), f.stack->usable());
#endif
    f.self = std::move(f.self).resume();
#if DISTRIBUTE_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
    f.local = t_local;
    t_local = thread_local_saved;
    running = nullptr;
  }
  // In the fiber, just after the switch into it.
  void entered(Fiber& f) {
#if DISTRIBUTE_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(f.fake_stack, &scheduler_bottom, &scheduler_size);
#else
    (void)f;
#endif
  }
  // In the fiber, just before the switch back to the scheduler.
  void leaving(Fiber& f, bool finishing) {
#if DISTRIBUTE_TSAN_FIBERS
    __tsan_switch_to_fiber(tsan_scheduler, 0);
#endif
#if DISTRIBUTE_ASAN_FIBERS
    __sanitizer_start_switch_fiber(finishing ? nullptr : &f.fake_stack, scheduler_bottom, scheduler_size);
#else
    (void)f;
    (void)finishing;
#endif
  }
};

namespace {
thread_local FiberThread::State* t_state = nullptr;
}  // namespace

FiberThread::FiberThread(std::vector<int> replicas, std::size_t stack_bytes) : state_(std::make_unique<State>()) {
  state_->fibers.resize(replicas.size());
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    Fiber& f = state_->fibers[i];
    f.replica = replicas[i];
    f.stack = std::make_unique<Stack>(stack_bytes);
  }
}

FiberThread::~FiberThread() = default;

void FiberThread::run(FunctionRef<void(int)> task) {
  State& s = *state_;
  assert(t_state == nullptr);
  t_state = &s;
  s.task = &task;
#if DISTRIBUTE_TSAN_FIBERS
  s.tsan_scheduler = __tsan_get_current_fiber();
#endif
  for (Fiber& f : s.fibers) {
    f.done = false;
    f.local = nullptr;
#if DISTRIBUTE_ASAN_FIBERS
    f.fake_stack = nullptr;  // the last run's was destroyed when it ended
    // The stack is reused: the frames the last run's fiber left without
    // returning (its entry, after the switch back) keep their redzones
    // poisoned, and a frame of this run placed over them would be reported
    // as an overflow (seen once: memcpy into a local array of the
    // baseline reduction kernel, 8 bytes in). A fresh fiber's stack is clean.
    ASAN_UNPOISON_MEMORY_REGION(f.stack->bottom(), f.stack->usable());
#endif
#if DISTRIBUTE_TSAN_FIBERS
    // A fresh TSan fiber per run, and the construction (which enters the
    // new stack once) under it, so that its shadow call stack starts empty
    // and is dropped with it.
    f.tsan = __tsan_create_fiber(0);
    __tsan_switch_to_fiber(f.tsan, 0);
#endif
    f.self = ctx::fiber(std::allocator_arg, StackRef{f.stack.get()}, [&s, &f](ctx::fiber&& scheduler) {
      s.scheduler = std::move(scheduler);
      s.entered(f);
      (*s.task)(f.replica);
      f.done = true;
      --s.live;
      s.leaving(f, /*finishing=*/true);
      return std::move(s.scheduler);
    });
#if DISTRIBUTE_TSAN_FIBERS
    __tsan_switch_to_fiber(s.tsan_scheduler, 0);
#endif
  }
  s.live = s.fibers.size();
  // Round robin: each fiber runs until it returns or waits; a waiting fiber
  // re-checks its condition when its turn comes again.
  while (s.live > 0) {
    for (Fiber& f : s.fibers) {
      if (!f.done) s.enter(f);
    }
  }
#if DISTRIBUTE_TSAN_FIBERS
  for (Fiber& f : s.fibers) {
    __tsan_destroy_fiber(f.tsan);
    f.tsan = nullptr;
  }
#endif
  s.task = nullptr;
  t_state = nullptr;
}

bool on_fiber() noexcept {
  const FiberThread::State* s = t_state;
  return s != nullptr && s->running != nullptr;
}

bool fiber_has_siblings() noexcept {
  const FiberThread::State* s = t_state;
  return s != nullptr && s->running != nullptr && s->live > 1;
}

void fiber_yield() noexcept {
  FiberThread::State* s = t_state;
  if (s == nullptr || s->running == nullptr || s->live <= 1) return;
  FiberThread::Fiber& f = *s->running;
  s->leaving(f, /*finishing=*/false);
  s->scheduler = std::move(s->scheduler).resume();
  s->entered(f);
}

void*& fiber_local() noexcept { return t_local; }

}  // namespace distribute::internal
