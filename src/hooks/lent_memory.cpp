// Memory lent to another library that takes an opaque owner object (CuPy's UnownedMemory):
// nbrmm._nbrmm._lend_memory(nbytes, mr, stream) -> (ptr, owner).
//
// The owner is a PyCapsule, not an nbrmm object: it holds the block, a C++ copy of the
// resource that serves it (shared with the resource object, as a Buffer's is) and the
// stream, and frees the block when it dies, on that thread, like a Buffer. CuPy keeps some
// memory until the process ends (library workspaces in module globals); an owner that is
// an nbrmm object would keep nbrmm objects past interpreter exit. The Python objects the
// owner keeps alive, as a Buffer keeps its `mr` and `stream` (the resource object, and a
// stream object other than the default streams'), are held as py_owned, which interpreter
// exit lets go of.
// (With an nbrmm.DeviceBuffer per allocation as the owner instead, cupy.empty(256) cost
// 1.44x CuPy's own pool on an H100, paired: see docs/performance.md.)
#include "bindings.hpp"
#include "core/args.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "resources/resource.hpp"
#include "resources/waiting_frees.hpp"
#include "streams/stream.hpp"

#include <memory>
#include <utility>

namespace nbrmm {
namespace {

constexpr char const* lent_capsule = "nbrmm.lent_memory";

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

nb::tuple lend_memory(nb::handle nbytes, nb::handle mr, nb::handle stream)
{
  std::size_t const n          = request_size(nbytes, "nbytes");
  cuda::stream_ref const s     = stream_arg(stream, "stream");
  nb::object const resource    = resource_or_current(mr, "mr");
  check_reentry(resource, "mr");
  auto& r = *nb::inst_ptr<DeviceMemoryResource>(resource);
  auto m  = std::make_unique<lent_memory>(
    r.shared(), s.get(), r.device >= 0 ? r.device : current_device(), r.calls_python,
    resource, never_destroyed(s.get()) ? nb::handle{} : stream);
  waiting_frees::perform();
  if (n != 0) {
    try {
      librmm_call call;
      m->b = allocate_block(m->res.get(), s, n, default_alignment, m->device);
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
  return nb::make_tuple(ptr, nb::steal(capsule));
}

}  // namespace

void bind_lent_memory(nb::module_& m)
{
  m.def("_lend_memory", &lend_memory, nb::arg("nbytes").none(), nb::arg("mr").none(),
        nb::arg("stream").none(),
        nb::sig("def _lend_memory(nbytes: int, mr: DeviceMemoryResource | None, "
                "stream: nbrmm._typing.CudaStreamLike) -> tuple[int, "
                "typing_extensions.CapsuleType]"),
        R"doc(Allocate ``nbytes`` bytes from ``mr`` (None: the current device resource) on
``stream``, for a library that takes an opaque owner of the memory.

Returns
-------
tuple[int, PyCapsule]
    The pointer (0 for 0 bytes) and its owner, which gives the memory back to the
    resource that allocated it, on ``stream``, when it dies.)doc");
}

}  // namespace nbrmm
