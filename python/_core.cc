// distribute._core: the C++ library for Python (pybind11). The Python package
// (python/distribute/) builds TF's Python API on it: nested structures,
// PerReplica values and TF's names live there; this file only moves tensors
// across without copies and runs Python code on the library's threads.
//
// Threads and the GIL:
//   - every call that may wait (run, collectives, get_next, strategy and
//     iterator destruction) releases the GIL, so that replica threads and
//     the input pipeline's threads can run Python code meanwhile;
//   - Python code called from the library's threads (replica functions, map
//     and filter functions, merge functions) takes the GIL for the call;
//   - a Python exception raised there travels through the library as a
//     PythonError (holding the exception object, released under the GIL)
//     and is raised again, the same object with its traceback, where the
//     call came back to Python;
//   - Python objects the library keeps (a numpy array behind a Tensor, a map
//     function) are released under the GIL on whichever thread drops them,
//     and leaked instead once the interpreter is finalizing.
#include <dlpack/dlpack.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "runtime/cpu_count.h"
#include "runtime/spin_wait.h"

namespace py = pybind11;
namespace dist = distribute;

namespace {

// Python objects whose last C++ reference was dropped by this thread while
// it waited in a ReleaseGil (e.g. a wrapped array that a collective kept
// until its next call): deleted when the ReleaseGil takes the GIL back.
// Taking the GIL inside the wait instead would put the thread to sleep
// behind another replica's Python code.
thread_local int t_gil_released = 0;
thread_local std::vector<std::pair<void*, void (*)(void*)>> t_deferred_deletes;

void run_deferred_deletes() {
  while (!t_deferred_deletes.empty()) {
    auto [p, del] = t_deferred_deletes.back();
    t_deferred_deletes.pop_back();
    del(p);
  }
}

// A Python object kept by C++: released under the GIL (leaked during
// interpreter finalization, when taking the GIL is no longer possible).
template <class T>
std::shared_ptr<T> keep(T* object) {
  return std::shared_ptr<T>(object, [](T* p) {
    if (Py_IsInitialized() == 0 || _Py_IsFinalizing() != 0) return;  // leak: the interpreter is gone
    if (t_gil_released > 0 && PyGILState_Check() == 0) {
      t_deferred_deletes.emplace_back(p, [](void* q) { delete static_cast<T*>(q); });
      return;
    }
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// A Python exception on its way through the library (a replica function's,
// a map function's): the exception object itself, with its traceback.
class PythonError : public std::exception {
 public:
  explicit PythonError(py::error_already_set& e) {
    // Called with the GIL held.
    e.restore();
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    PyErr_NormalizeException(&type, &value, &trace);
    if (trace != nullptr && value != nullptr) PyException_SetTraceback(value, trace);
    exception_ = keep(new py::object(py::reinterpret_steal<py::object>(value)));
    Py_XDECREF(type);
    Py_XDECREF(trace);
    what_ = py::str(*exception_).cast<std::string>();
    const std::string type_name = py::str(py::type::handle_of(*exception_).attr("__name__")).cast<std::string>();
    what_ = type_name + (what_.empty() ? "" : ": " + what_);
  }
  const char* what() const noexcept override { return what_.c_str(); }
  // Raises the exception again in Python (the GIL held).
  void restore() const {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception_->ptr())), exception_->ptr());
  }

 private:
  std::shared_ptr<py::object> exception_;
  std::string what_;
};

// The GIL between replica threads. When a collective returns, the other
// replicas usually return too and all want the GIL at once: one gets it,
// and the others sleep in the kernel until it calls its next collective;
// waking a sleeping thread costs tens of microseconds on the machines
// measured (BENCHMARKS.md), more than the Python between two collectives.
// So a replica thread that leaves a collective while another replica
// thread holds the GIL waits for up to kGilHandOff first (pausing, or
// yielding: t_gil_wait_pauses below), until that one releases it, and then
// usually takes a free GIL without sleeping.
// g_replica_gil_holders counts the replica threads holding the GIL as this
// module sees it, or about to take it: inside a replica function, less those
// inside one of its calls that released the GIL (ReleaseGil, which every
// binding uses). A thread whose Python code releases the GIL elsewhere
// (numpy, torch, time.sleep) still counts: then the others wait the whole
// kGilHandOff before sleeping as before.
std::atomic<int> g_replica_gil_holders{0};
thread_local int t_replica_depth = 0;  // replica functions running on this thread
// How claim_gil_turn waits on this thread: with pause instructions while the
// running strategy's replica threads (one per replica: Python strategies
// keep threads) fit the usable cores, as the library's own waits decide,
// else with sched_yield, which gives the core to the thread holding the GIL
// when it shares this one. A yield is a system call (about a microsecond on
// the machines measured): waiting with it cost a small all_reduce from
// Python about 40 % more (BENCHMARKS.md, 2026-12-07).
thread_local bool t_gil_wait_pauses = false;
constexpr auto kGilHandOff = std::chrono::microseconds(30);

// Counts this thread among the GIL's holders, claimed before taking it:
// another replica thread taking the GIL at the same moment sees the claim
// and waits, rather than finding the count still 0, blocking in
// PyEval_RestoreThread behind this one and sleeping in the kernel (which
// made a context switch of every other collective).
void claim_gil_turn() {
  int free = 0;
  if (g_replica_gil_holders.compare_exchange_strong(free, 1, std::memory_order_relaxed)) return;
  const auto until = std::chrono::steady_clock::now() + kGilHandOff;
  for (;;) {
    if (t_gil_wait_pauses) {
      // A burst of pauses between looks (one look costs a clock read).
      for (int i = 0; i < 16 && g_replica_gil_holders.load(std::memory_order_relaxed) != 0; ++i) {
        dist::internal::cpu_relax();
      }
    } else {
      std::this_thread::yield();
    }
    free = 0;
    if (g_replica_gil_holders.load(std::memory_order_relaxed) == 0 &&
        g_replica_gil_holders.compare_exchange_weak(free, 1, std::memory_order_relaxed)) {
      return;
    }
    if (std::chrono::steady_clock::now() >= until) {
      g_replica_gil_holders.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
}

// Counts this thread among the GIL's holders while a replica function runs
// (made before taking the GIL).
struct ReplicaGilHolder {
  ReplicaGilHolder() {
    ++t_replica_depth;
    if (const dist::ReplicaContext* ctx = dist::get_replica_context(); ctx != nullptr) {
      // The cores are counted once per thread and replica count (reading
      // the affinity mask is a system call).
      thread_local int counted_for = 0;
      const int replicas = ctx->strategy().num_local_replicas();
      if (replicas != counted_for) {
        t_gil_wait_pauses = static_cast<unsigned>(replicas) <= dist::internal::usable_cores();
        counted_for = replicas;
      }
    }
    claim_gil_turn();
  }
  ~ReplicaGilHolder() {
    g_replica_gil_holders.fetch_sub(1, std::memory_order_relaxed);
    --t_replica_depth;
  }
  ReplicaGilHolder(const ReplicaGilHolder&) = delete;
  ReplicaGilHolder& operator=(const ReplicaGilHolder&) = delete;
};

// py::gil_scoped_release for the module's waits, with the hand-off
// above when the calling thread runs a replica function.
class ReleaseGil {
 public:
  ReleaseGil() : counted_(t_replica_depth > 0) {
    state_ = PyEval_SaveThread();
    ++t_gil_released;
    if (counted_) g_replica_gil_holders.fetch_sub(1, std::memory_order_relaxed);
  }
  ~ReleaseGil() {
    if (counted_) claim_gil_turn();
    PyEval_RestoreThread(state_);
    --t_gil_released;
    run_deferred_deletes();
  }
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  bool counted_;
  PyThreadState* state_ = nullptr;
};

// `f()` (a std::string path, an optional one or a list of them) with the
// GIL released, returned as bytes: the Python side gives them back as str
// with os.fsdecode, so a path that is not UTF-8 round-trips instead of
// raising UnicodeDecodeError after the file was written.
template <class F>
py::object paths_out(F&& f) {
  using R = decltype(f());
  R result;
  {
    ReleaseGil release;
    result = f();
  }
  if constexpr (std::is_same_v<R, std::string>) {
    return py::bytes(result);
  } else if constexpr (std::is_same_v<R, std::optional<std::string>>) {
    return result ? py::object(py::bytes(*result)) : py::object(py::none());
  } else {
    py::list out;
    for (const std::string& p : result) out.append(py::bytes(p));
    return out;
  }
}

// A library thread's Python thread state, kept from its first call into
// Python to its end (creating one per call would cost tens of microseconds
// each time); freed when the thread ends (pipeline threads come and go with
// their iterators), unless the interpreter is exiting or gone.
// (A thread Python made, as the caller's, has a thread state of Python's
// own, which Python deletes: it is neither kept nor freed here.)
struct KeptThreadState {
  bool decided = false;  // whether the thread is the library's, once known
  bool kept = false;
  // Before the GIL is taken on this thread for the first time.
  void note_thread() {
    if (decided) return;
    decided = true;
    library_thread = PyGILState_GetThisThreadState() == nullptr;
  }
  void keep(py::gil_scoped_acquire& gil) {
    if (kept || !library_thread) return;
    gil.inc_ref();
    kept = true;
  }
  bool library_thread = false;
  ~KeptThreadState() {
    if (!kept || Py_IsInitialized() == 0 || _Py_IsFinalizing() != 0) return;
    // The kept reference back: the scope's own release then deletes the
    // thread state (pybind11's gil_scoped_acquire, count 0).
    py::gil_scoped_acquire gil;
    gil.dec_ref();
  }
};

// Calls `f` with the GIL, turning a Python exception into a PythonError.
template <class F>
auto with_gil(F&& f) {
  // Taking the GIL while the interpreter finalizes ends the thread
  // (pthread_exit): refuse instead.
  if (_Py_IsFinalizing() != 0) {
    throw dist::CancelledError("a Python function was called while the interpreter is exiting");
  }
  thread_local KeptThreadState kept;
  kept.note_thread();
  py::gil_scoped_acquire gil;
  kept.keep(gil);
  try {
    return f();
  } catch (py::error_already_set& e) {
    throw PythonError(e);
  }
}

// --- Ctrl-C -------------------------------------------------------------------
// Python runs signal handlers (Ctrl-C's KeyboardInterrupt) on the main
// thread only, between bytecodes. While the main thread waits in the
// library with the GIL released, a ScopedInterruptCheck runs them every
// 50 ms (distribute/interrupt.h): the exception a handler raises ends the
// wait (run() aborts its collectives and waits for its replicas) and is
// raised in the caller. Replica threads busy in Python code get a
// KeyboardInterrupt of their own (PyThreadState_SetAsyncExc), so that
// run() returns within a bytecode of them; a replica in a blocking C call
// (time.sleep) returns from it first.

unsigned long g_main_thread = 0;  // set at import

// The threads running a replica function now; touched under the GIL only.
std::set<unsigned long>& running_replicas() {
  static auto* threads = new std::set<unsigned long>();  // leaked: used until exit
  return *threads;
}

// Set when the replicas of the main thread's run are interrupted: a
// replica that had not started its function yet raises at its start.
// Cleared when the main thread starts a run. Under the GIL.
bool g_replicas_interrupted = false;

// Raises KeyboardInterrupt in the replica threads' Python code (GIL held;
// never in the main thread, which got the signal's own exception). Only
// replicas of runs started by the main thread are registered.
void interrupt_replicas() {
  g_replicas_interrupted = true;
  for (unsigned long id : running_replicas()) {
    if (id != g_main_thread) PyThreadState_SetAsyncExc(id, PyExc_KeyboardInterrupt);
  }
}

// True while the main thread runs signal handlers from inside a wait: a
// handler that calls back into a waiting call of the library (run inside
// run, next on the iterator being waited on) is refused, not deadlocked.
bool g_in_signal_handlers = false;  // main thread only

void check_signals() {
  py::gil_scoped_acquire gil;
  g_in_signal_handlers = true;
  const int raised = PyErr_CheckSignals();
  g_in_signal_handlers = false;
  if (raised == 0) return;
  interrupt_replicas();
  py::error_already_set e;
  throw PythonError(e);
}

// Made before releasing the GIL for a wait: on the main thread, the wait
// runs Python's signal handlers.
struct Interruptible {
  Interruptible() {
    if (PyThread_get_thread_ident() != g_main_thread) return;
    if (g_in_signal_handlers) {
      throw dist::FailedPreconditionError(
          "a Python signal handler called into distribute while the main thread waits in it (a run, a "
          "collective or get_next): do the work after that call returns (e.g. set a flag in the handler)");
    }
    check.emplace(&check_signals);
  }
  std::optional<dist::ScopedInterruptCheck> check;
};

// Runs a replica function under the GIL, its thread known to
// interrupt_replicas() meanwhile.
void call_replica_function(const py::function& f, int replica, bool from_main_thread) {
  ReplicaGilHolder holder;
  with_gil([&] {
    if (!from_main_thread) {
      f(replica);
      return;
    }
    if (g_replicas_interrupted) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
      throw py::error_already_set();
    }
    const unsigned long me = PyThread_get_thread_ident();
    running_replicas().insert(me);
    struct Leave {
      unsigned long me;
      ~Leave() {
        running_replicas().erase(me);
        // An interrupt that arrived after the function's last bytecode is
        // not carried into the thread's next Python code.
        if (me != g_main_thread) PyThreadState_SetAsyncExc(me, nullptr);
      }
    } leave{me};
    try {
      f(replica);
    } catch (py::error_already_set& e) {
      // Ctrl-C seen by the main thread's replica: the others stop too.
      if (me == g_main_thread && e.matches(PyExc_KeyboardInterrupt)) interrupt_replicas();
      throw;
    }
  });
}

// --- Tensors <-> Python buffers ---------------------------------------------

std::optional<dist::DType> dtype_of_format(const py::buffer_info& info) {
  if (info.format.empty()) return std::nullopt;
  // Native byte order only ('<' on this little-endian target, '=' and '@').
  if (info.format.size() > 1 && (info.format[0] == '>' || info.format[0] == '!')) return std::nullopt;
  const char f = info.format.back();
  const auto size = static_cast<std::size_t>(info.itemsize);
  if (f == 'f' && size == 4) return dist::DType::kFloat32;
  if (f == 'd' && size == 8) return dist::DType::kFloat64;
  if ((f == 'i' || f == 'l') && size == 4) return dist::DType::kInt32;
  if ((f == 'l' || f == 'q') && size == 8) return dist::DType::kInt64;
  return std::nullopt;
}

const char* format_of(dist::DType dtype) {
  switch (dtype) {
    case dist::DType::kFloat32: return "f";
    case dist::DType::kFloat64: return "d";
    case dist::DType::kInt32: return "i";
    case dist::DType::kInt64: return "q";
    case dist::DType::kString: break;  // no buffer format: tensor_buffer refuses strings
  }
  return "f";
}

// Wraps a C-contiguous buffer of a supported dtype without a copy; the
// buffer (and the object exporting it) lives as long as any view of the
// tensor. Writable buffers can receive a donated all_reduce's result.
dist::Tensor wrap_buffer(const py::buffer& buffer, bool need_writable = false) {
  std::shared_ptr<py::buffer_info> info;
  try {
    info = keep(new py::buffer_info(buffer.request(need_writable)));
  } catch (py::error_already_set& e) {
    if (!need_writable || !e.matches(PyExc_BufferError)) throw;
    throw dist::InvalidArgumentError("all_reduce_in_place: expected writable arrays or tensors, got a read-only " +
                                     py::str(py::type::handle_of(buffer).attr("__name__")).cast<std::string>());
  }
  const std::optional<dist::DType> dtype = dtype_of_format(*info);
  if (!dtype.has_value()) {
    throw dist::InvalidArgumentError("expected a buffer of float32, float64, int32 or int64, got format '" +
                                     info->format + "' of " + std::to_string(info->itemsize) + "-byte items");
  }
  dist::Shape shape;
  if (info->ndim > static_cast<py::ssize_t>(dist::Shape::kMaxRank)) {
    throw dist::InvalidArgumentError("expected at most " + std::to_string(dist::Shape::kMaxRank) +
                                     " dimensions, got " + std::to_string(info->ndim));
  }
  py::ssize_t expected = info->itemsize;
  for (py::ssize_t k = info->ndim - 1; k >= 0; --k) {
    const auto i = static_cast<std::size_t>(k);
    if (info->shape[i] > 1 && info->strides[i] != expected) {
      throw dist::InvalidArgumentError("expected a C-contiguous buffer, got strides " +
                                       py::str(py::cast(info->strides)).cast<std::string>());
    }
    expected *= info->shape[i];
  }
  for (py::ssize_t k = 0; k < info->ndim; ++k) shape.push_back(info->shape[static_cast<std::size_t>(k)]);
  const void* data = info->ptr;
  const bool writable = !info->readonly;
  return dist::Tensor::wrap(*dtype, std::move(shape), data, std::move(info), writable);
}

// A tensor the caller owns alone and may write (experimental_allocate_shared's):
// its buffer is exported writable.
struct WritableTensor {
  dist::Tensor tensor;
};

py::buffer_info tensor_buffer(const dist::Tensor& t, bool readonly = true);

py::buffer_info tensor_buffer(const dist::Tensor& t, bool readonly) {
  std::vector<py::ssize_t> shape, strides(static_cast<std::size_t>(t.rank()));
  for (int k = 0; k < t.rank(); ++k) shape.push_back(static_cast<py::ssize_t>(t.dim(k)));
  auto stride = static_cast<py::ssize_t>(dist::dtype_size(t.dtype()));
  for (int k = t.rank() - 1; k >= 0; --k) {
    strides[static_cast<std::size_t>(k)] = stride;
    stride *= shape[static_cast<std::size_t>(k)];
  }
  // Read-only: Tensors are immutable (numpy sees the library's buffer).
  return py::buffer_info(const_cast<std::byte*>(t.bytes().data()), static_cast<py::ssize_t>(dist::dtype_size(t.dtype())),
                         format_of(t.dtype()), t.rank(), shape, strides, readonly);
}

// pybind11's getbuffer slot cannot fail (an exception from the def_buffer
// function terminates): this slot, installed over it, refuses string tensors
// with a BufferError (numpy then uses Tensor.__array__: bytes objects) and
// hands every other tensor to pybind11's.
getbufferproc g_pybind_getbuffer = nullptr;

int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  bool is_string = false;
  try {
    is_string = py::cast<const dist::Tensor&>(py::handle(obj)).dtype() == dist::DType::kString;
  } catch (const std::exception&) {
  }
  if (is_string) {
    if (view != nullptr) view->obj = nullptr;
    PyErr_SetString(PyExc_BufferError, "a string tensor has no buffer of numbers; use .numpy() for its bytes");
    return -1;
  }
  return g_pybind_getbuffer(obj, view, flags);
}

// --- DLPack export ------------------------------------------------------------
// A Tensor as a DLPack 0.6 "dltensor" capsule (numpy.from_dlpack,
// torch.from_dlpack): the consumer gets the tensor's own buffer, kept alive
// by a copy of the Tensor until the consumer calls the deleter (or the
// capsule dies unconsumed). DLPack 0.6 cannot say "read-only": the
// consumer must not write it (a torch tensor made from it may, and would
// change every value sharing the buffer).
struct DlpackExport {
  DLManagedTensor managed{};
  dist::Tensor tensor;
  std::vector<std::int64_t> shape;
};

DLDataType dlpack_dtype(dist::DType dtype) {
  switch (dtype) {
    case dist::DType::kFloat32: return {kDLFloat, 32, 1};
    case dist::DType::kFloat64: return {kDLFloat, 64, 1};
    case dist::DType::kInt32: return {kDLInt, 32, 1};
    case dist::DType::kInt64: return {kDLInt, 64, 1};
    case dist::DType::kString: break;  // no DLPack type: to_dlpack refuses strings
  }
  return {kDLFloat, 32, 1};
}

py::capsule to_dlpack(const dist::Tensor& t) {
  if (t.dtype() == dist::DType::kString) {
    throw dist::InvalidArgumentError("__dlpack__: expected a tensor of a number dtype, got dtype string");
  }
  auto* e = new DlpackExport{{}, t, {}};
  for (int k = 0; k < t.rank(); ++k) e->shape.push_back(t.dim(k));
  DLTensor& d = e->managed.dl_tensor;
  d.data = const_cast<std::byte*>(e->tensor.bytes().data());
  d.device = {kDLCPU, 0};
  d.ndim = t.rank();
  d.dtype = dlpack_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = nullptr;  // C-contiguous
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<DlpackExport*>(m->manager_ctx); };
  // A consumer renames the capsule "used_dltensor" and owns the tensor;
  // an unconsumed capsule frees it itself.
  PyObject* capsule = PyCapsule_New(&e->managed, "dltensor", [](PyObject* self) {
    if (PyCapsule_IsValid(self, "dltensor") == 0) return;
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  });
  if (capsule == nullptr) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

dist::ReduceOp reduce_op(const std::string& name) {
  if (name == "SUM") return dist::ReduceOp::SUM;
  if (name == "MEAN") return dist::ReduceOp::MEAN;
  throw dist::InvalidArgumentError("expected ReduceOp.SUM or ReduceOp.MEAN (or \"sum\", \"mean\"), got " + name);
}

// ReplicaContext::all_reduce of `values` (a Tensor or a vector of them)
// from Python, with the GIL released for the wait.
template <class Values>
auto replica_all_reduce(const std::string& op, const Values& values, std::optional<double> timeout) {
  dist::ReplicaContext& ctx = dist::current_replica_context();
  dist::CommunicationOptions options;
  options.timeout_seconds = timeout;
  Interruptible interruptible;
  ReleaseGil nogil;
  return ctx.all_reduce(reduce_op(op), values, options);
}

dist::InputOptions input_options(int buffer_size, const std::string& policy) {
  dist::InputOptions options;
  options.experimental_per_replica_buffer_size = buffer_size;
  if (policy == "AUTO") options.auto_shard_policy = dist::AutoShardPolicy::AUTO;
  else if (policy == "FILE") options.auto_shard_policy = dist::AutoShardPolicy::FILE;
  else if (policy == "DATA") options.auto_shard_policy = dist::AutoShardPolicy::DATA;
  else if (policy == "OFF") options.auto_shard_policy = dist::AutoShardPolicy::OFF;
  else throw dist::InvalidArgumentError("InputOptions: expected auto_shard_policy AUTO, FILE, DATA or OFF, got " + policy);
  return options;
}

std::string policy_name(dist::AutoShardPolicy policy) {
  switch (policy) {
    case dist::AutoShardPolicy::AUTO:
      return "AUTO";
    case dist::AutoShardPolicy::FILE:
      return "FILE";
    case dist::AutoShardPolicy::DATA:
      return "DATA";
    case dist::AutoShardPolicy::OFF:
      return "OFF";
  }
  return "AUTO";
}

py::tuple spec_list(const dist::ElementSpec& spec) {
  py::list components;
  for (const dist::TensorSpec& c : spec.components) {
    components.append(py::make_tuple(std::string(dist::dtype_name(c.dtype)), py::tuple(py::cast(c.shape))));
  }
  return py::make_tuple(components, spec.is_tuple);
}

struct ManagerHolder {
  std::unique_ptr<dist::Checkpoint> checkpoint = std::make_unique<dist::Checkpoint>();
  std::unique_ptr<dist::CheckpointManager> manager;
};

// d.element_spec() (which may read a first element, running Python map
// functions on pipeline threads) with the GIL released, as spec_list.
template <class D>
py::tuple spec_without_gil(const D& d) {
  std::optional<dist::ElementSpec> spec;
  {
    Interruptible interruptible;
    ReleaseGil nogil;
    spec = d.element_spec();
  }
  return spec_list(*spec);
}

dist::Element element_of(std::vector<dist::Tensor> components, bool is_tuple) {
  if (!is_tuple && components.size() == 1) return dist::Element(std::move(components[0]));
  return dist::Element(std::move(components));
}

// A distributed iterator's next step (get_next_as_optional or next_in_loop),
// per local replica the element's components; None at the end.
template <class Iterator>
std::optional<std::vector<std::vector<dist::Tensor>>> step_of(
    Iterator& it, std::optional<dist::PerReplica<dist::Element>> (dist::DistributedIterator::*next)()) {
  std::optional<dist::PerReplica<dist::Element>> step;
  {
    Interruptible interruptible;
    ReleaseGil nogil;
    step = (it.get().*next)();
  }
  if (!step.has_value()) return std::nullopt;
  std::vector<std::vector<dist::Tensor>> out;
  for (const dist::Element& e : *step) out.push_back(e.components());
  return out;
}

// A Python object carried through merge_call.
struct PyHandle {
  std::shared_ptr<py::object> object;
};

template <class T>
struct ReleasingDeleter {
  void operator()(T* p) const {
    // (Not while the interpreter finalizes: the GIL cannot be handed back
    // then, and no Python code runs on the library's threads any more.)
    if (Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0 && PyGILState_Check() != 0) {
      ReleaseGil nogil;
      delete p;
    } else {
      delete p;
    }
  }
};
template <class T>
using Owned = std::unique_ptr<T, ReleasingDeleter<T>>;

// An iterator Python can close before the interpreter finalizes (the
// package's atexit hook does): its pipeline threads, which may be calling
// Python map functions, are stopped and joined with the GIL released.
template <class It>
struct Closable {
  explicit Closable(It it) : iterator(std::make_unique<It>(std::move(it))) {}
  ~Closable() { close(); }
  It& get() {
    if (!iterator) throw dist::FailedPreconditionError("the iterator was closed (the interpreter is exiting)");
    return *iterator;
  }
  void close() {
    if (!iterator) return;
    if (Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0 && PyGILState_Check() != 0) {
      ReleaseGil nogil;
      iterator.reset();
    } else {
      iterator.reset();
    }
  }
  std::unique_ptr<It> iterator;
};

// A strategy's scope held by a Python context manager. A scope belongs to
// the thread that entered it (each thread has its own stack of scopes):
// exit() on another thread, or out of order, raises and leaves it open; a
// holder dropped on another thread, or on its own thread while it is not
// the innermost scope there (a generator holding `with s.scope()` collected
// inside a replica function), leaks its scope rather than pop another
// scope or replica context off the stack.
struct ScopeHolder {
  struct Inner {
    explicit Inner(dist::Strategy& s) : scope(s.scope()) {}
    dist::StrategyScope scope;
  };
  explicit ScopeHolder(dist::Strategy& s)
      : inner(std::make_unique<Inner>(s)), strategy(&s), thread(PyThread_get_thread_ident()) {}
  ~ScopeHolder() {
    if (inner && (PyThread_get_thread_ident() != thread || !innermost())) (void)inner.release();
  }
  bool innermost() const { return dist::get_replica_context() == nullptr && &dist::get_strategy() == strategy; }
  void exit() {
    if (!inner) return;
    const unsigned long here = PyThread_get_thread_ident();
    if (here != thread) {
      throw dist::FailedPreconditionError("Strategy.scope(): the scope of " + strategy->to_string() +
                                          " was entered on thread " + std::to_string(thread) +
                                          " and must be exited there, got its exit on thread " +
                                          std::to_string(here) + " (threading.get_ident())");
    }
    if (!innermost()) {
      throw dist::FailedPreconditionError("Strategy.scope(): scopes must be exited in the reverse order they were "
                                          "entered; the scope of " + strategy->to_string() +
                                          " is not the innermost on this thread (that is " +
                                          dist::get_strategy().to_string() + ")");
    }
    inner.reset();
  }
  std::unique_ptr<Inner> inner;
  dist::Strategy* strategy;
  unsigned long thread;
};

}  // namespace

// The module definition is long on purpose: a list of bindings, grouped by
// the `// ---` sections below (tensors, parsing, datasets, strategies,
// variables and checkpoints, context and collectives); the logic they call
// lives in the helpers above and in the C++ library.
PYBIND11_MODULE(_core, m) {
  m.doc() = "The C++ core of the distribute package (internal: use the distribute module)";
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  // Errors: the Python classes are defined in distribute/errors.py and
  // registered here, so that library errors arrive as them.
  // Leaked on purpose: a static py::object would be released at exit,
  // after the interpreter is gone.
  static py::dict* error_classes = new py::dict();  // code name -> class
  m.def("_set_error_classes", [](py::dict classes) { *error_classes = classes; });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PythonError& e) {
      e.restore();
    } catch (const dist::Error& e) {
      const std::string code(dist::error_code_name(e.code()));
      if (error_classes->contains(code)) {
        py::object cls = (*error_classes)[py::str(code)];
        PyErr_SetObject(cls.ptr(), py::str(e.what()).ptr());
      } else {
        PyErr_SetString(PyExc_RuntimeError, e.what());
      }
    }
  });

  py::class_<dist::Tensor>(m, "Tensor", py::buffer_protocol())
      .def_buffer([](const dist::Tensor& t) { return tensor_buffer(t); })
      .def_property_readonly("shape",
                             [](const dist::Tensor& t) {
                               py::tuple shape(static_cast<std::size_t>(t.rank()));
                               for (int k = 0; k < t.rank(); ++k) shape[static_cast<std::size_t>(k)] = t.dim(k);
                               return shape;
                             })
      .def_property_readonly("dtype", [](const dist::Tensor& t) { return std::string(dist::dtype_name(t.dtype())); })
      .def(
          "__dlpack__", [](const dist::Tensor& t, const py::object&) { return to_dlpack(t); },
          py::arg("stream") = py::none(), "The tensor's buffer as a DLPack capsule, without a copy (read-only)")
      .def("__dlpack_device__", [](const dist::Tensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); })
      .def("_to_string", &dist::Tensor::to_string)
      .def("_strings",
           [](const dist::Tensor& t) {
             const auto strings = t.strings();
             py::list out(strings.size());
             for (std::size_t i = 0; i < strings.size(); ++i) out[i] = py::bytes(strings[i]);
             return out;
           })
      .def("_data_address", [](const dist::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.bytes().data()); })
      .def("_shares_buffer_with", &dist::Tensor::shares_buffer_with);
  {
    auto* type = reinterpret_cast<PyTypeObject*>(m.attr("Tensor").ptr());
    g_pybind_getbuffer = type->tp_as_buffer->bf_getbuffer;
    type->tp_as_buffer->bf_getbuffer = &tensor_getbuffer;
  }
  py::class_<WritableTensor>(m, "_WritableTensor", py::buffer_protocol())
      .def_buffer([](const WritableTensor& w) { return tensor_buffer(w.tensor, /*readonly=*/false); });
  m.def("wrap", [](const py::buffer& b) { return wrap_buffer(b); }, "A Tensor over a C-contiguous buffer, without a copy");
  m.def(
      "strings",
      [](const std::vector<std::string>& values, const std::vector<std::int64_t>& shape) {
        return dist::Tensor(values, dist::Shape(shape));
      },
      "A string tensor of `values` (bytes) laid out in `shape` (a copy)");

  // --- Parsing tf.train.Example -----------------------------------------------
  // spec: (name, shape, dtype name, default value or None) per feature.
  m.def(
      "parse_example",
      [](const dist::Tensor& serialized,
         const std::vector<std::tuple<std::string, std::vector<std::int64_t>, std::string, std::optional<dist::Tensor>>>&
             spec) {
        dist::FeatureSpec features;
        for (const auto& [name, shape, dtype, default_value] : spec) {
          dist::DType d = dist::DType::kString;
          if (dtype == "int64") {
            d = dist::DType::kInt64;
          } else if (dtype == "float32") {
            d = dist::DType::kFloat32;
          } else if (dtype != "string") {
            throw dist::InvalidArgumentError("parse_example: feature '" + name +
                                             "': expected dtype int64, float32 or string, got " + dtype);
          }
          features[name] = dist::FixedLenFeature{dist::Shape(shape), d, default_value};
        }
        py::gil_scoped_release release;
        return dist::parse_example(serialized, features);
      },
      py::arg("serialized"), py::arg("spec"));

  // --- Datasets -------------------------------------------------------------
  py::class_<dist::Dataset>(m, "Dataset")
      .def_static("text_line",
                  [](std::vector<std::string> files, std::string compression, std::int64_t buffer_size,
                     std::int64_t num_parallel_reads) {
                    return dist::TextLineDataset(std::move(files),
                                                 {std::move(compression), buffer_size, num_parallel_reads});
                  })
      .def_static("tfrecord",
                  [](std::vector<std::string> files, std::string compression, std::int64_t buffer_size,
                     std::int64_t num_parallel_reads) {
                    return dist::TFRecordDataset(std::move(files),
                                                 {std::move(compression), buffer_size, num_parallel_reads});
                  })
      .def_static("from_tensor_slices",
                  [](std::vector<dist::Tensor> components, bool is_tuple) {
                    if (!is_tuple && components.size() == 1) return dist::Dataset::from_tensor_slices(components[0]);
                    return dist::Dataset::from_tensor_slices(std::move(components));
                  })
      .def_static("from_tensors",
                  [](std::vector<dist::Tensor> components, bool is_tuple) {
                    return dist::Dataset::from_tensors(element_of(std::move(components), is_tuple));
                  })
      .def_static("range", [](std::int64_t start, std::int64_t stop,
                              std::int64_t step) { return dist::Dataset::range(start, stop, step); })
      .def("batch", &dist::Dataset::batch)
      .def("unbatch", &dist::Dataset::unbatch)
      .def("shuffle", &dist::Dataset::shuffle)
      .def("repeat", &dist::Dataset::repeat)
      .def("take", &dist::Dataset::take)
      .def("skip", &dist::Dataset::skip)
      .def("shard", &dist::Dataset::shard)
      .def("prefetch", &dist::Dataset::prefetch)
      .def("describe", &dist::Dataset::describe)
      .def("cardinality", &dist::Dataset::cardinality)
      // fn(components) -> (components, is_tuple); runs on the pipeline's
      // threads under the GIL.
      .def("map",
           [](const dist::Dataset& d, py::function fn, std::int64_t parallel) {
             auto f = keep(new py::function(std::move(fn)));
             return d.map(
                 [f](const dist::Element& e) {
                   return with_gil([&] {
                     py::tuple out = (*f)(e.components());
                     return element_of(out[0].cast<std::vector<dist::Tensor>>(), out[1].cast<bool>());
                   });
                 },
                 parallel);
           })
      .def("filter",
           [](const dist::Dataset& d, py::function fn) {
             auto f = keep(new py::function(std::move(fn)));
             return d.filter([f](const dist::Element& e) {
               return with_gil([&] { return py::cast<bool>((*f)(e.components())); });
             });
           })
      .def_static("zip", &dist::Dataset::zip)
      .def("enumerate", &dist::Dataset::enumerate)
      .def("padded_batch", &dist::Dataset::padded_batch)
      .def("cache", &dist::Dataset::cache)
      // fn(components) -> a core Dataset; runs on the pipeline's threads
      // under the GIL.
      .def("flat_map",
           [](const dist::Dataset& d, py::function fn) {
             auto f = keep(new py::function(std::move(fn)));
             return d.flat_map([f](const dist::Element& e) {
               return with_gil([&] { return (*f)(e.components()).cast<dist::Dataset>(); });
             });
           })
      .def("interleave",
           [](const dist::Dataset& d, py::function fn, std::int64_t cycle, std::int64_t block, std::int64_t parallel) {
             auto f = keep(new py::function(std::move(fn)));
             return d.interleave(
                 [f](const dist::Element& e) {
                   return with_gil([&] { return (*f)(e.components()).cast<dist::Dataset>(); });
                 },
                 cycle, block, parallel);
           })
      // The auto-shard policy's name, or None to set nothing.
      .def("with_options",
           [](const dist::Dataset& d, std::optional<std::string> policy) {
             dist::Options options;
             if (policy.has_value())
               options.experimental_distribute.auto_shard_policy = input_options(1, *policy).auto_shard_policy;
             return d.with_options(options);
           })
      .def("auto_shard_policy",
           [](const dist::Dataset& d) -> std::optional<std::string> {
             const auto p = d.options().experimental_distribute.auto_shard_policy;
             if (!p.has_value()) return std::nullopt;
             return policy_name(*p);
           })
      // ([(dtype name, shape with -1 for unknown)], is_tuple)
      .def("element_spec", [](const dist::Dataset& d) { return spec_without_gil(d); })
      .def("make_iterator", [](const dist::Dataset& d) {
        return std::make_unique<Closable<dist::Dataset::Iterator>>(d.make_iterator());
      });
  using DatasetIterator = Closable<dist::Dataset::Iterator>;
  py::class_<DatasetIterator>(m, "DatasetIterator")
      .def("close", &DatasetIterator::close)
      .def("get_next_as_optional", [](DatasetIterator& it) -> std::optional<std::vector<dist::Tensor>> {
        std::optional<dist::Element> e;
        {
          Interruptible interruptible;
          ReleaseGil nogil;
          e = it.get().get_next_as_optional();
        }
        if (!e.has_value()) return std::nullopt;
        return e->components();
      });

  py::class_<dist::InputContext>(m, "InputContext")
      .def(py::init<int, int, int>(), py::arg("num_input_pipelines") = 1, py::arg("input_pipeline_id") = 0,
           py::arg("num_replicas_in_sync") = 1)
      .def_property_readonly("num_input_pipelines", &dist::InputContext::num_input_pipelines)
      .def_property_readonly("input_pipeline_id", &dist::InputContext::input_pipeline_id)
      .def_property_readonly("num_replicas_in_sync", &dist::InputContext::num_replicas_in_sync)
      .def("get_per_replica_batch_size", &dist::InputContext::get_per_replica_batch_size)
      .def("__repr__", &dist::InputContext::to_string);

  py::class_<dist::DistributedDataset>(m, "DistributedDataset")
      .def_property_readonly("num_replicas_in_sync", &dist::DistributedDataset::num_replicas_in_sync)
      .def("element_spec", [](const dist::DistributedDataset& d) { return spec_without_gil(d); })
      .def("cardinality", &dist::DistributedDataset::cardinality, py::call_guard<py::gil_scoped_release>())
      .def("make_iterator", [](const dist::DistributedDataset& d) {
        return std::make_unique<Closable<dist::DistributedIterator>>(d.make_iterator());
      });
  // A step: per local replica, the element's components.
  using DistributedIterator = Closable<dist::DistributedIterator>;
  py::class_<DistributedIterator>(m, "DistributedIterator")
      .def("close", &DistributedIterator::close)
      .def("get_next_as_optional",
           [](DistributedIterator& it) { return step_of(it, &dist::DistributedIterator::get_next_as_optional); })
      .def("next_in_loop",
           [](DistributedIterator& it) { return step_of(it, &dist::DistributedIterator::next_in_loop); });

  // --- Strategies -----------------------------------------------------------
  py::class_<ScopeHolder>(m, "Scope").def("exit", &ScopeHolder::exit);
  py::class_<dist::Strategy, Owned<dist::Strategy>>(m, "Strategy")
      .def_property_readonly("num_replicas_in_sync", &dist::Strategy::num_replicas_in_sync)
      .def_property_readonly("num_local_replicas", &dist::Strategy::num_local_replicas)
      .def_property_readonly("num_workers", &dist::Strategy::num_workers)
      .def_property_readonly("worker_index", &dist::Strategy::worker_index)
      .def_property_readonly("is_chief", &dist::Strategy::is_chief)
      .def_property_readonly("id", &dist::Strategy::id)
      .def_property_readonly("devices",
                             [](const dist::Strategy& s) {
                               std::vector<std::string> names;
                               for (const dist::DeviceSpec& d : s.devices()) names.push_back(d.short_name());
                               return names;
                             })
      .def("__repr__", &dist::Strategy::to_string)
      // One writable buffer object per local replica (numpy.asarray of each
      // is the array to hand to all_reduce_in_place).
      .def("experimental_allocate_shared",
           [](dist::Strategy& s, const std::string& dtype, const std::vector<std::int64_t>& shape) {
             dist::DType d = dist::DType::kString;
             for (const dist::DType numeric :
                  {dist::DType::kFloat32, dist::DType::kFloat64, dist::DType::kInt32, dist::DType::kInt64}) {
               if (dist::dtype_name(numeric) == dtype) d = numeric;
             }
             if (d == dist::DType::kString) {
               throw dist::InvalidArgumentError(
                   "experimental_allocate_shared: expected dtype float32, float64, int32 or int64, got " + dtype);
             }
             const dist::Shape dims(shape);
             const std::int64_t elements = dist::internal::checked_element_count(dims, d);  // (checks the shape)
             std::vector<std::shared_ptr<std::byte>> blocks;
             {
               Interruptible interruptible;
               ReleaseGil nogil;
               blocks = s.experimental_allocate_shared(static_cast<std::size_t>(elements) * dist::dtype_size(d));
             }
             std::vector<WritableTensor> out;
             for (std::shared_ptr<std::byte>& b : blocks) {
               std::byte* data = b.get();
               out.push_back({dist::Tensor::wrap(d, dims, data, std::move(b), /*writable=*/true)});
             }
             return out;
           })
      // body(r) for every local replica r, concurrently on the replica
      // threads, each inside its replica context and under the GIL.
      .def("run",
           [](dist::Strategy& s, py::function body) {
             auto f = keep(new py::function(std::move(body)));
             const int base = s.worker_index() * s.num_local_replicas();
             Interruptible interruptible;
             const bool from_main_thread = interruptible.check.has_value();
             if (from_main_thread) g_replicas_interrupted = false;
             ReleaseGil nogil;
             s.run([&] {
               const int r = dist::current_replica_context().replica_id_in_sync_group() - base;
               call_replica_function(*f, r, from_main_thread);
             });
           })
      // For bench/python_bench.py only: all_reduce_bench's BM_AllReduce loop
      // in C++ on this strategy's own replica threads (every replica a
      // float32 tensor of `bytes` holding r + 1, 3 untimed calls, then
      // `calls` calls inside one run), so that the Python loop and its C++
      // reference alternate in one process, milliseconds apart. Returns
      // replica 0's microseconds per call.
      .def("_benchmark_all_reduce",
           [](dist::Strategy& s, std::int64_t bytes, int calls) {
             if (bytes < 4 || bytes % 4 != 0 || calls < 1) {
               throw dist::InvalidArgumentError("_benchmark_all_reduce: expected a positive multiple of 4 bytes and "
                                                "at least one call, got " + std::to_string(bytes) + " bytes and " +
                                                std::to_string(calls) + " calls");
             }
             const std::int64_t count = bytes / 4;
             const float expected = static_cast<float>(s.num_replicas_in_sync() * (s.num_replicas_in_sync() + 1) / 2);
             double us = 0;
             Interruptible interruptible;
             ReleaseGil nogil;
             s.run([&] {
               dist::ReplicaContext& ctx = dist::current_replica_context();
               const dist::Tensor x(std::vector<float>(static_cast<std::size_t>(count),
                                                       static_cast<float>(ctx.replica_id_in_sync_group() + 1)),
                                    dist::Shape{count});
               for (int i = 0; i < 3; ++i) (void)ctx.all_reduce(dist::ReduceOp::SUM, x);
               const auto start = std::chrono::steady_clock::now();
               for (int i = 0; i < calls; ++i) {
                 const dist::Tensor sum = ctx.all_reduce(dist::ReduceOp::SUM, x);
                 if (i == 0 && sum.data<float>()[static_cast<std::size_t>(count - 1)] != expected) {
                   throw dist::InternalError("_benchmark_all_reduce: wrong sum");
                 }
               }
               if (ctx.replica_id_in_sync_group() == 0) {
                 const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
                 us = took.count() / calls;
               }
             });
             return us;
           })
      .def("scope_enter", [](dist::Strategy& s) { return std::make_unique<ScopeHolder>(s); })
      .def("reduce",
           [](dist::Strategy& s, const std::string& op, std::vector<dist::Tensor> values, std::optional<int> axis,
              bool mirrored) {
             Interruptible interruptible;
             ReleaseGil nogil;
             if (mirrored) return s.reduce(reduce_op(op), dist::Mirrored<dist::Tensor>(std::move(values)), axis);
             return s.reduce(reduce_op(op), dist::PerReplica<dist::Tensor>(std::move(values)), axis);
           })
      .def("reduce_plain",
           [](dist::Strategy& s, const std::string& op, const dist::Tensor& value, std::optional<int> axis) {
             Interruptible interruptible;
             ReleaseGil nogil;
             return s.reduce(reduce_op(op), value, axis);
           })
      .def("gather",
           [](dist::Strategy& s, std::vector<dist::Tensor> values, int axis) {
             Interruptible interruptible;
             ReleaseGil nogil;
             return s.gather(dist::PerReplica<dist::Tensor>(std::move(values)), axis);
           })
      .def("gather_plain",
           [](dist::Strategy& s, const dist::Tensor& value, int axis) {
             Interruptible interruptible;
             ReleaseGil nogil;
             return s.gather(value, axis);
           })
      // strategy.extended: fn(r) for each component r of var, in its update
      // context (on this thread, under the GIL).
      .def("extended_update",
           [](dist::Strategy& s, const dist::Variable& var, py::function fn) {
             std::vector<int> components(static_cast<std::size_t>(var.num_components()));
             for (std::size_t r = 0; r < components.size(); ++r) components[r] = static_cast<int>(r);
             s.extended().update(
                 var, [&](dist::Variable&, int r) { fn(r); }, dist::PerReplica<int>(components));
           })
      // kind: "plain", "per_replica" or "mirrored" values.
      .def("extended_reduce_to",
           [](dist::Strategy& s, const std::string& op, std::vector<dist::Tensor> values, const std::string& kind,
              const dist::Variable& destination) {
             Interruptible interruptible;
             ReleaseGil nogil;
             const dist::StrategyExtended ext = s.extended();
             if (kind == "plain") return ext.reduce_to(reduce_op(op), values.at(0), destination).values();
             if (kind == "mirrored") {
               return ext.reduce_to(reduce_op(op), dist::Mirrored<dist::Tensor>(std::move(values)), destination)
                   .values();
             }
             return ext.reduce_to(reduce_op(op), dist::PerReplica<dist::Tensor>(std::move(values)), destination)
                 .values();
           })
      .def("variable_created_in_scope",
           [](dist::Strategy& s, const dist::Variable& v) { return s.extended().variable_created_in_scope(v); })
      .def("worker_devices", [](dist::Strategy& s) { return s.extended().worker_devices(); })
      .def("experimental_distribute_dataset",
           [](dist::Strategy& s, const dist::Dataset& d, int buffer_size, const std::string& policy) {
             return s.experimental_distribute_dataset(d, input_options(buffer_size, policy));
           })
      .def("distribute_datasets_from_function",
           [](dist::Strategy& s, py::function fn, int buffer_size, const std::string& policy) {
             return s.distribute_datasets_from_function(
                 [&](const dist::InputContext& c) { return fn(c).cast<dist::Dataset>(); },
                 input_options(buffer_size, policy));
           });

  m.def("MirroredStrategy", [](std::optional<std::vector<std::string>> devices) {
    if (!devices.has_value()) return Owned<dist::Strategy>(new dist::MirroredStrategy());
    return Owned<dist::Strategy>(new dist::MirroredStrategy(*devices));
  });
  m.def("OneDeviceStrategy",
        [](const std::string& device) { return Owned<dist::Strategy>(new dist::OneDeviceStrategy(device)); });
  m.def("MultiWorkerMirroredStrategy", [](std::vector<std::string> local_devices, std::optional<double> timeout,
                                           bool shared_memory) {
    dist::MultiWorkerOptions options;
    options.local_devices = std::move(local_devices);
    options.communication.timeout_seconds = timeout;
    options.shared_memory = shared_memory;
    ReleaseGil nogil;
    return Owned<dist::Strategy>(new dist::MultiWorkerMirroredStrategy(options));
  });
  m.def("default_strategy_id", [] { return dist::get_default_strategy().id(); });
  m.def(
      "default_strategy", []() -> dist::Strategy& { return dist::get_default_strategy(); },
      py::return_value_policy::reference);
  m.def("usable_cpu_count", &dist::usable_cpu_count);
  m.def("compute_average_loss", [](const dist::Tensor& loss, std::optional<dist::Tensor> weight,
                                    std::optional<std::int64_t> global_batch_size) {
    return dist::nn::compute_average_loss(loss, {.sample_weight = std::move(weight),
                                                 .global_batch_size = global_batch_size});
  });
  m.def("scale_regularization_loss", &dist::nn::scale_regularization_loss);

  // --- Variables and checkpoints ----------------------------------------------
  // Every call may communicate (a MirroredVariable's replica-context update
  // is a merge_call; multi-worker creation and reads cross the workers): the
  // GIL is released.
  py::class_<dist::Variable>(m, "Variable")
      .def(py::init([](const dist::Tensor& initial, std::string name, const std::string& synchronization,
                       const std::string& aggregation, std::optional<bool> trainable) {
             dist::VariableOptions options;
             options.name = std::move(name);
             options.trainable = trainable;
             if (synchronization == "AUTO") options.synchronization = dist::VariableSynchronization::AUTO;
             else if (synchronization == "NONE") options.synchronization = dist::VariableSynchronization::NONE;
             else if (synchronization == "ON_WRITE") options.synchronization = dist::VariableSynchronization::ON_WRITE;
             else if (synchronization == "ON_READ") options.synchronization = dist::VariableSynchronization::ON_READ;
             else throw dist::InvalidArgumentError("Variable: expected synchronization AUTO, NONE, ON_WRITE or "
                                                   "ON_READ, got " + synchronization);
             if (aggregation == "NONE") options.aggregation = dist::VariableAggregation::NONE;
             else if (aggregation == "SUM") options.aggregation = dist::VariableAggregation::SUM;
             else if (aggregation == "MEAN") options.aggregation = dist::VariableAggregation::MEAN;
             else if (aggregation == "ONLY_FIRST_REPLICA") options.aggregation = dist::VariableAggregation::ONLY_FIRST_REPLICA;
             else throw dist::InvalidArgumentError("Variable: expected aggregation NONE, SUM, MEAN or "
                                                   "ONLY_FIRST_REPLICA, got " + aggregation);
             ReleaseGil nogil;
             return dist::Variable(initial, options);
           }))
      .def_property_readonly("name", &dist::Variable::name)
      .def_property_readonly("trainable", &dist::Variable::trainable)
      .def_property_readonly("is_mirrored", &dist::Variable::is_mirrored)
      .def_property_readonly("is_sync_on_read", &dist::Variable::is_sync_on_read)
      .def_property_readonly("num_components", &dist::Variable::num_components)
      .def("value", &dist::Variable::value, py::call_guard<ReleaseGil>())
      .def("values", &dist::Variable::values, py::call_guard<ReleaseGil>())
      .def("assign", &dist::Variable::assign, py::call_guard<ReleaseGil>())
      .def("assign_add", &dist::Variable::assign_add, py::call_guard<ReleaseGil>())
      .def("assign_sub", &dist::Variable::assign_sub, py::call_guard<ReleaseGil>())
      .def("__repr__", &dist::Variable::to_string);
  py::class_<dist::Checkpoint>(m, "Checkpoint")
      .def(py::init([](std::optional<int> max_to_keep) {
        dist::CheckpointOptions options;
        options.max_to_keep = max_to_keep;
        return dist::Checkpoint(options);
      }))
      .def("track", [](dist::Checkpoint& c, const std::string& name, dist::Variable v) { c.track(name, std::move(v)); })
      // (distribute.Checkpoint makes a core Checkpoint for each call, so the
      // iterator it points to is alive while it is used.)
      .def("track_iterator",
           [](dist::Checkpoint& c, const std::string& name, DistributedIterator& it) { c.track(name, it.get()); })
      .def("tracked_names", &dist::Checkpoint::tracked_names)
      .def("save", [](dist::Checkpoint& c, const std::string& d) { return paths_out([&] { return c.save(d); }); })
      .def("write", [](dist::Checkpoint& c, const std::string& p) { return paths_out([&] { return c.write(p); }); })
      .def(
          "restore",
          [](dist::Checkpoint& c, const std::string& path, bool expect_partial) {
            c.restore(path, {.expect_partial = expect_partial});
          },
          py::call_guard<ReleaseGil>());
  m.def("latest_checkpoint",
        [](const std::string& d) { return paths_out([&] { return dist::latest_checkpoint(d); }); });
  m.def("latest_checkpoint_of_chief", [](const std::string& d, dist::Strategy& s) {
    return paths_out([&] { return dist::latest_checkpoint(d, s); });
  });
  // A CheckpointManager over one core Checkpoint whose tracked values each
  // call replaces (distribute.Checkpoint builds a core Checkpoint per call).
  py::class_<ManagerHolder>(m, "CheckpointManager")
      .def(py::init([](std::string directory, std::optional<int> max_to_keep, std::optional<double> hours,
                       std::string name, py::object step_counter, std::optional<std::int64_t> interval,
                       py::object init_fn) {
        auto holder = std::make_unique<ManagerHolder>();
        dist::CheckpointManagerOptions options;
        options.max_to_keep = max_to_keep;
        options.keep_checkpoint_every_n_hours = hours;
        options.checkpoint_name = std::move(name);
        if (!step_counter.is_none()) {
          auto f = keep(new py::object(std::move(step_counter)));
          options.step_counter = [f] { return with_gil([&] { return (*f)().cast<std::int64_t>(); }); };
        }
        options.checkpoint_interval = interval;
        if (!init_fn.is_none()) {
          auto f = keep(new py::object(std::move(init_fn)));
          options.init_fn = [f] { with_gil([&] { (*f)(); }); };
        }
        holder->manager =
            std::make_unique<dist::CheckpointManager>(*holder->checkpoint, std::move(directory), std::move(options));
        return holder;
      }))
      .def(
          "save",
          [](ManagerHolder& h, dist::Checkpoint& c, std::optional<std::int64_t> number, bool check_interval) {
            return paths_out([&] {
              *h.checkpoint = std::move(c);
              return h.manager->save(number, check_interval);
            });
          })
      .def(
          "restore_or_initialize",
          [](ManagerHolder& h, dist::Checkpoint& c) {
            return paths_out([&] {
              *h.checkpoint = std::move(c);
              return h.manager->restore_or_initialize();
            });
          })
      .def("latest_checkpoint",
           [](const ManagerHolder& h) { return paths_out([&] { return h.manager->latest_checkpoint(); }); })
      .def("checkpoints", [](const ManagerHolder& h) { return paths_out([&] { return h.manager->checkpoints(); }); })
      .def("directory", [](const ManagerHolder& h) { return py::bytes(h.manager->directory()); })
      .def("checkpoint_interval", [](const ManagerHolder& h) { return h.manager->checkpoint_interval(); });

  // --- Context and collectives -----------------------------------------------
  // The current replica's (local index, id in sync, replicas in sync, the
  // strategy's id), or None in cross-replica context.
  m.def("replica_context", []() -> std::optional<py::tuple> {
    dist::ReplicaContext* ctx = dist::get_replica_context();
    if (ctx == nullptr) return std::nullopt;
    return py::make_tuple(ctx->replica_id_in_sync_group(), ctx->num_replicas_in_sync(), ctx->strategy().id());
  });
  m.def("current_strategy_id", [] { return dist::get_strategy().id(); });
  m.def("in_cross_replica_context", &dist::in_cross_replica_context);
  m.def("all_reduce", [](const std::string& op, std::vector<dist::Tensor> values, std::optional<double> timeout) {
    return replica_all_reduce(op, values, timeout);
  });
  // all_reduce of one numpy array, the common case (a gradient), wrapped
  // here rather than by Python's convert(): None when the array needs
  // convert's handling (a copy of strided or non-native-order input, or its
  // error for an unsupported dtype).
  m.def("all_reduce_array",
        [](const std::string& op, const py::buffer& array,
           std::optional<double> timeout) -> std::optional<dist::Tensor> {
          std::optional<dist::Tensor> value;
          try {
            value.emplace(wrap_buffer(array));
          } catch (const dist::InvalidArgumentError&) {
            return std::nullopt;
          }
          return replica_all_reduce(op, *value, timeout);
        });
  // all_reduce_in_place's whole call (C-contiguous writable buffers): the
  // buffers are donated, and those not reduced in place receive their
  // result here, after a barrier when other local replicas may still read
  // them (every replica takes the same branch: the in-place set is the same
  // on all of them).
  m.def("all_reduce_into", [](const std::string& op, const std::vector<py::buffer>& targets,
                              std::optional<double> timeout) {
    dist::ReplicaContext& ctx = dist::current_replica_context();
    dist::CommunicationOptions options;
    options.timeout_seconds = timeout;
    std::vector<dist::Tensor> values;
    values.reserve(targets.size());
    for (const py::buffer& b : targets) values.push_back(wrap_buffer(b, /*need_writable=*/true));
    std::vector<std::byte*> destinations;
    for (const dist::Tensor& t : values) destinations.push_back(const_cast<std::byte*>(t.bytes().data()));
    // Buffers that overlap (one array passed twice, overlapping views) are
    // not donated: reduced in place, one would read the other's sums. Then
    // nothing of this call is in place on any replica (donation needs every
    // replica's), and every replica takes the copying branch below.
    std::vector<std::pair<std::byte*, std::size_t>> ranges;
    for (const dist::Tensor& t : values) {
      if (!t.bytes().empty()) ranges.emplace_back(const_cast<std::byte*>(t.bytes().data()), t.bytes().size());
    }
    std::sort(ranges.begin(), ranges.end());
    bool overlap = false;
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      overlap = overlap || ranges[i - 1].first + ranges[i - 1].second > ranges[i].first;
    }
    const bool other_local_replicas = ctx.strategy().num_local_replicas() > 1;
    const dist::ReduceOp reduce = reduce_op(op);
    Interruptible interruptible;
    ReleaseGil nogil;
    std::vector<dist::Tensor> results =
        overlap ? ctx.all_reduce(reduce, values, options) : ctx.all_reduce(reduce, std::move(values), options);
    // (Empty tensors do not count: their data pointers may differ between
    // replicas, and the decision must be the same on all of them.)
    int in_place = 0;
    bool copies = false;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (results[i].bytes().empty()) continue;
      const bool same = results[i].bytes().data() == destinations[i];
      in_place += same ? 1 : 0;
      copies = copies || !same;
    }
    if (!copies) return in_place;
    if (other_local_replicas) ctx.all_reduce(dist::ReduceOp::SUM, dist::Tensor(0.f), options);
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto bytes = results[i].bytes();
      if (bytes.data() != destinations[i] && !bytes.empty()) std::memcpy(destinations[i], bytes.data(), bytes.size());
    }
    return in_place;  // how many were reduced in place (for tests)
  });
  m.def("all_gather", [](std::vector<dist::Tensor> values, int axis, std::optional<double> timeout) {
    dist::ReplicaContext& ctx = dist::current_replica_context();
    dist::CommunicationOptions options;
    options.timeout_seconds = timeout;
    Interruptible interruptible;
    ReleaseGil nogil;
    return ctx.all_gather(values, axis, options);
  });
  // merge_fn(list of every replica's argument) runs once, on replica 0's
  // thread in cross-replica context; every replica gets its result.
  m.def("merge_call", [](py::function merge_fn, py::object argument) {
    dist::ReplicaContext& ctx = dist::current_replica_context();
    auto fn = keep(new py::function(std::move(merge_fn)));
    PyHandle mine{keep(new py::object(std::move(argument)))};
    PyHandle result;
    {
      Interruptible interruptible;
      ReleaseGil nogil;
      result = ctx.merge_call(
          [fn](dist::Strategy&, const dist::PerReplica<PyHandle>& all) {
            return with_gil([&] {
              py::list arguments;
              for (const PyHandle& h : all) arguments.append(*h.object);
              return PyHandle{keep(new py::object((*fn)(arguments)))};
            });
          },
          mine);
    }
    return *result.object;
  });
}
