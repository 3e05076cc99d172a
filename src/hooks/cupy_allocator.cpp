// The CuPy hook's call: nbrmm._nbrmm._CupyHook, the base of
// nbrmm.allocators.cupy.CupyAllocator (python/nbrmm/allocators/cupy.py, which checks the
// arguments and documents the class). CuPy calls `allocator(nbytes)` for every allocation
// it makes; this is that call.
//
// It allocates from the bound resource (None: the current device resource) on the fixed
// stream (None: CuPy's current stream, its default streams read as nbrmm's), and returns
// CuPy's own documented objects: a `cupy.cuda.MemoryPointer` to a `cupy.cuda.UnownedMemory`
// whose owner is an opaque PyCapsule. The capsule holds the block, a C++ copy of the
// resource that serves it (shared with the resource object, as a Buffer's is) and the
// stream, and frees the block when it dies, on that thread, like a Buffer. It is not an
// nbrmm object because CuPy keeps some memory until the process ends (library workspaces
// in module globals): the Python objects it keeps alive (the resource object, and a
// stream object other than the default streams') are held as py_owned, which interpreter
// exit lets go of.
//
// Written in C++ for speed: CuPy calls it for every array. The same call written in Python
// (a method that calls the allocation and CuPy's constructors, as nbrmm did before) makes
// `cupy.empty(256)` cost more; benchmarks/bench_paired.py times both, paired
// (bench_paired_cupy_empty, reference "the hook's call written in Python").
#include "bindings.hpp"
#include "core/args.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "core/history.hpp"
#include "resources/resource.hpp"
#include "resources/waiting_frees.hpp"
#include "streams/stream.hpp"

#include <memory>
#include <string>
#include <utility>

namespace nbrmm {
namespace {

constexpr char const* lent_capsule = "nbrmm.lent_memory";

/// Memory lent to CuPy: what the capsule owns.
struct lent_memory {
  lent_memory(std::shared_ptr<device_resource> share, cudaStream_t s, int dev,
              bool python, nb::handle resource_object, nb::handle stream_owner)
    : res{std::move(share)},
      stream{s},
      device{dev},
      calls_python{python},
      mr{resource_object},
      keep{stream_owner}
  {
  }
  held_resource res;
  block b;
  cudaStream_t stream;
  int device;
  bool calls_python;  ///< frees may call Python (the re-entrancy rule applies)
  py_owned mr;        ///< the resource object
  py_owned keep;      ///< the stream object, unless the stream is a default one
};

/// The capsule's destructor: gives the block back (see the comment at the top).
void give_back(PyObject* capsule) noexcept
{
  auto* raw = static_cast<lent_memory*>(PyCapsule_GetPointer(capsule, lent_capsule));
  if (raw == nullptr) {
    PyErr_Clear();
    return;
  }
  std::unique_ptr<lent_memory> m{raw};
  if (m->b.raw == nullptr) { return; }
  if (!holds_gil()) {  // (after interpreter exit: C++ statics freed late)
    free_block(m->res.get(), cuda::stream_ref{m->stream}, m->b, m->device);
    return;
  }
  nb::handle const mr = m->mr.get();
  if (m->calls_python && mr.is_valid() && would_reenter(mr)) {
    waiting_frees::add(m->res, m->b, m->stream, m->device, mr);
    return;
  }
  waiting_frees::perform();
  gil_release release;
  free_block(m->res.get(), cuda::stream_ref{m->stream}, m->b, m->device);
}

/// Allocates `n` bytes from `mr` (None: the current device resource) on `stream` for CuPy:
/// (the pointer, its owner capsule).
std::pair<std::uintptr_t, nb::object> lend(std::size_t n, nb::handle mr, nb::handle stream)
{
  cuda::stream_ref const s  = stream_arg(stream, "stream");
  nb::object const resource = resource_or_current(mr, "mr");
  check_reentry(resource, "mr");
  auto& r = *nb::inst_ptr<DeviceMemoryResource>(resource);
  auto m  = std::make_unique<lent_memory>(
    r.shared(), s.get(), r.device >= 0 ? r.device : current_device(), r.calls_python,
    resource, never_destroyed(s.get()) ? nb::handle{} : stream);
  waiting_frees::perform();
  if (n != 0) {
    try {
      librmm_call call;
      m->b = allocate_block(m->res.get(), s, n, default_alignment, m->device,
                            history::source::cupy);
    } catch (rmm::out_of_memory const&) {
      raise_out_of_memory(resource, n, m->device, s.get());
    }
  }
  auto const ptr = reinterpret_cast<std::uintptr_t>(m->b.data);
  PyObject* capsule = PyCapsule_New(m.get(), lent_capsule, &give_back);
  if (capsule == nullptr) {
    if (m->b.raw != nullptr) {
      gil_release release;
      free_block(m->res.get(), s, m->b, m->device);
    }
    throw nb::python_error();
  }
  (void)m.release();  // the capsule owns it now
  return {ptr, nb::steal(capsule)};
}

/// What a CupyAllocator is: its resource and stream, and the parts of CuPy its call uses
/// (given by nbrmm.allocators.cupy, which imports CuPy).
struct CupyHook {
  nb::object mr;      ///< the bound resource, or None
  nb::object stream;  ///< the fixed stream (an nbrmm Stream), or None
  int device{-1};     ///< the device `mr` serves; -1: any (or the current one)
  // CuPy's, in the order of the `cupy` tuple given to __init__:
  nb::object get_device_id;       ///< cupy.cuda.get_device_id
  nb::object get_current_stream;  ///< cupy.cuda.get_current_stream
  nb::object unowned_memory;      ///< cupy.cuda.UnownedMemory
  nb::object memory_pointer;      ///< cupy.cuda.MemoryPointer
  nb::object null_stream;         ///< cupy.cuda.Stream.null, read as nbrmm.DEFAULT_STREAM
  nb::object default_stream;      ///< nbrmm.DEFAULT_STREAM
  nb::object ptds_stream;         ///< cupy.cuda.Stream.ptds, read as ...
  nb::object per_thread_stream;   ///< ... nbrmm.PER_THREAD_DEFAULT_STREAM
  nb::object out_of_memory;       ///< (nbytes, MemoryError) -> CuPy's OutOfMemoryError

  template <class F>
  void for_each(F&& f)
  {
    for (nb::object* o : {&mr, &stream, &get_device_id, &get_current_stream, &unowned_memory,
                          &memory_pointer, &null_stream, &default_stream, &ptds_stream,
                          &per_thread_stream, &out_of_memory}) {
      f(*o);
    }
  }
};

constexpr std::size_t cupy_parts = 9;

void init(CupyHook* self, nb::handle mr, nb::handle stream, int device, nb::tuple cupy)
{
  if (cupy.size() != cupy_parts) {
    throw nb::value_error("cupy: expected the 9 parts of CuPy that the call uses");
  }
  auto* h   = new (self) CupyHook{};
  h->mr     = nb::borrow(mr);
  h->stream = nb::borrow(stream);
  h->device = device;
  nb::object* parts[] = {&h->get_device_id, &h->get_current_stream, &h->unowned_memory,
                         &h->memory_pointer, &h->null_stream, &h->default_stream,
                         &h->ptds_stream, &h->per_thread_stream, &h->out_of_memory};
  for (std::size_t i = 0; i < cupy_parts; ++i) { *parts[i] = nb::borrow(cupy[i]); }
}

/// Raises CuPy's OutOfMemoryError for the MemoryError `error`, which it chains (`raise ...
/// from error`), or `error` itself where it is CuPy's already.
[[noreturn]] void raise_for_cupy(CupyHook& h, std::size_t n, nb::python_error& error)
{
  nb::object const cause = nb::borrow(error.value());
  nb::object const oom   = h.out_of_memory(n, cause);
  if (!oom.is(cause)) {
    PyException_SetCause(oom.ptr(), cause.inc_ref().ptr());  // (steals; sets the suppression)
    PyException_SetContext(oom.ptr(), cause.inc_ref().ptr());
  }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(oom.ptr())), oom.ptr());
  throw nb::python_error();
}

/// The size CuPy asks for: an int (a NumPy integer too), as nbrmm._args.check_size reads it.
std::size_t size_arg(nb::handle nbytes)
{
  if (!PyLong_CheckExact(nbytes.ptr())) {
    nb::object const checked =
      nb::module_::import_("nbrmm._args").attr("check_size")(nbytes, "nbytes");
    return request_size(checked, "nbytes");
  }
  return request_size(nbytes, "nbytes");
}

nb::object call(CupyHook& h, nb::handle nbytes)
{
  std::size_t const n = size_arg(nbytes);
  if (!h.get_device_id.is_valid() || h.get_device_id.is_none()) {
    throw nb::type_error("the allocator is no longer usable (it was cleared)");
  }
  int const device = nb::cast<int>(h.get_device_id());
  if (h.device >= 0 && device != h.device) {
    throw nb::value_error(("mr: the resource serves device " + std::to_string(h.device) +
                           ", but CuPy is allocating on device " + std::to_string(device))
                            .c_str());
  }
  nb::object stream = h.stream;
  if (stream.is_none()) {
    stream = h.get_current_stream(device);
    if (stream.is(h.null_stream)) {
      stream = h.default_stream;
    } else if (stream.is(h.ptds_stream)) {
      stream = h.per_thread_stream;
    }
    // Any other CuPy stream is read through __cuda_stream__ and kept alive by the owner
    // until the memory is freed.
  }
  std::pair<std::uintptr_t, nb::object> lent;
  try {
    lent = lend(n, h.mr, stream);
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_MemoryError)) { throw; }
    raise_for_cupy(h, n, error);
  }
  nb::object const memory = h.unowned_memory(lent.first, n, lent.second, device);
  return h.memory_pointer(memory, 0);
}

int traverse(PyObject* self, visitproc visit, void* arg)
{
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) { return 0; }
  int result = 0;
  nb::inst_ptr<CupyHook>(self)->for_each([&](nb::object& o) {
    if (result == 0 && o.is_valid()) { result = visit(o.ptr(), arg); }
  });
  return result;
}

int clear(PyObject* self)
{
  if (!nb::inst_ready(self)) { return 0; }
  nb::inst_ptr<CupyHook>(self)->for_each([](nb::object& o) { o.reset(); });
  return 0;
}

PyType_Slot cupy_hook_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(traverse)},
                                 {Py_tp_clear, reinterpret_cast<void*>(clear)},
                                 {0, nullptr}};

nb::object or_none(nb::object const& o) { return o.is_valid() ? o : nb::none(); }

}  // namespace

void bind_cupy_allocator(nb::module_& m)
{
  nb::class_<CupyHook>(m, "_CupyHook", nb::type_slots(cupy_hook_slots),
                       "The call of nbrmm.allocators.cupy.CupyAllocator (its base class).")
    .def("__init__", &init, nb::arg("mr").none(), nb::arg("stream").none(), nb::arg("device"),
         nb::arg("cupy"),
         nb::sig("def __init__(self, mr: DeviceMemoryResource | None, stream: Stream | None, "
                 "device: int, cupy: tuple[collections.abc.Callable[[], int], "
                 "collections.abc.Callable[[int], typing.Any], type, type, typing.Any, Stream, "
                 "typing.Any, Stream, collections.abc.Callable[[int, MemoryError], "
                 "BaseException]]) -> None"),
         "Bind ``mr`` (None: the current device resource at each call), ``stream`` (None: "
         "CuPy's current stream at each call), the device ``mr`` serves (-1: any) and the "
         "parts of CuPy the call uses (checked by nbrmm.allocators.cupy).")
    .def("__call__", &call,  // (no nb::arg: positional-only)
         nb::sig("def __call__(self, nbytes: int, /) -> typing.Any"),
         R"doc(Allocate ``nbytes`` bytes for CuPy.

Parameters
----------
nbytes : int
    The size in bytes.

Returns
-------
cupy.cuda.MemoryPointer
    A pointer to the start of a ``cupy.cuda.UnownedMemory`` whose owner holds the
    allocation; 0 bytes allocate nothing and give a null pointer.

Raises
------
cupy.cuda.memory.OutOfMemoryError
    If the resource cannot allocate (``__cause__`` is its ``MemoryError``).
TypeError, ValueError
    If ``nbytes`` is not a non-negative int below 2**64, or the bound resource serves
    another device than CuPy's current one.)doc")
    .def_prop_ro(
      "mr", [](CupyHook& h) { return or_none(h.mr); },
      nb::sig("def mr(self) -> DeviceMemoryResource | None"),
      "The bound resource, or None: the current device resource at each allocation.")
    .def_prop_ro(
      "stream", [](CupyHook& h) { return or_none(h.stream); },
      nb::sig("def stream(self) -> Stream | None"),
      "The fixed stream (an nbrmm.Stream), or None: CuPy's current stream at each allocation.");
}

}  // namespace nbrmm
