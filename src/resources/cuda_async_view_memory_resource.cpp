// nbrmm.mr.CudaAsyncViewMemoryResource (rmm/mr/cuda_async_view_memory_resource.hpp):
// cudaMallocFromPoolAsync on an existing CUDA memory pool that it does not own.
//
// The Python object that owns the pool (a resource with `pool_handle()`, a cuda-bindings
// handle, cuda.core's pool resources through nbrmm.interop) is owned by the C++ resource
// itself, beside librmm's view: every C++ copy (in librmm's per-device map, in buffers,
// in adaptors, in other extensions) co-owns it, so the pool outlives every use of the
// view, whatever Python drops. The garbage collector sees the owner through the Python
// object, as every other reference a resource's C++ state holds (see resource.hpp).
#include "resources/adaptor.hpp"

#include <rmm/mr/cuda_async_view_memory_resource.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace nbrmm {
namespace {

using view_resource = rmm::mr::cuda_async_view_memory_resource;

struct CudaAsyncViewMemoryResource : DeviceMemoryResource {};

/// librmm's view of a pool, and the Python object that owns the pool (none for a plain
/// handle), shared by all copies. Views of one pool compare equal, as librmm's do.
class owned_view : public holder_resource<view_resource, std::unique_ptr<py_owned>> {
 public:
  owned_view(cudaMemPool_t pool, nb::handle owner)
    : holder_resource{owner.is_valid() ? std::make_unique<py_owned>(owner, /*guards_memory=*/true)
                                       : nullptr,
                      pool}
  {
  }
  bool operator==(owned_view const& o) const noexcept { return inner() == o.inner(); }

  /// The pool's owner, or nullptr.
  [[nodiscard]] PyObject* owner() const noexcept
  {
    return extra() ? extra()->get().ptr() : nullptr;
  }
};

/// The pool behind `obj` (an int, an object with `__int__` such as cuda-bindings'
/// cudaMemPool_t / CUmemoryPool, or an object with a `pool_handle()` method), and the
/// object that owns it (None for a plain int).
cudaMemPool_t pool_arg(nb::handle obj, nb::object& owner, int device)
{
  nb::object value;
  // A handle of the wrong type is a ValueError, as rmm raises.
  if (PyBool_Check(obj.ptr())) {
    throw nb::value_error("pool_handle: expected a memory pool handle, got bool");
  }
  bool const is_class = PyType_Check(obj.ptr());  // its methods are unbound: no pool
  if (PyLong_Check(obj.ptr())) {
    value = nb::borrow(obj);
  } else if (!is_class && nb::hasattr(obj, "pool_handle") && PyCallable_Check(obj.attr("pool_handle").ptr())) {
    if (nb::isinstance<DeviceMemoryResource>(obj)) { resource_on_device(obj, "pool_handle", device); }
    value = obj.attr("pool_handle")();
    owner = nb::borrow(obj);
  } else if (!is_class && (PyIndex_Check(obj.ptr()) || nb::hasattr(obj, "__int__"))) {
    value = nb::steal(PyNumber_Long(obj.ptr()));
    if (!value.is_valid()) { throw nb::python_error(); }
    owner = nb::borrow(obj);
  } else {
    throw nb::value_error(("pool_handle: expected a cudaMemPool_t, CUmemoryPool, int or an "
                          "object with pool_handle(), got " +
                          type_of(obj, nb::type<DeviceMemoryResource>()))
                           .c_str());
  }
  if (!PyLong_Check(value.ptr())) {
    throw nb::type_error("pool_handle: pool_handle() must return an int");
  }
  auto const raw = PyLong_AsUnsignedLongLong(value.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw nb::value_error("pool_handle: not a valid pointer value");
  }
  if (raw == 0) { throw nb::value_error("pool_handle: the handle is null"); }
  return reinterpret_cast<cudaMemPool_t>(static_cast<std::uintptr_t>(raw));
}

}  // namespace

void bind_cuda_async_view_memory_resource(nb::module_& m)
{
  resource_class<CudaAsyncViewMemoryResource>(m, "CudaAsyncViewMemoryResource", R"doc(
Memory resource that allocates from an existing CUDA memory pool, which it does not own.

Use it to share a pool with another library, or to use a pool created with custom
flags (``cudaDeviceGetDefaultMemPool`` gives the device's default pool).

Parameters
----------
pool_handle : cudaMemPool_t, CUmemoryPool, int or resource
    The pool: a cuda-bindings handle, its value as an int, or an object with a
    ``pool_handle()`` method such as ``CudaAsyncMemoryResource``. The Python object
    passed is owned by the resource and by every C++ copy of it (in librmm's per-device
    map, in buffers, in adaptors), so a pool that the object owns outlives every use of
    the resource. A pool given as a plain int must outlive them by other means.)doc")
    .def(
      "__init__",
      [](CudaAsyncViewMemoryResource* self, nb::handle pool_handle) {
        init_guard const guard{self};
        int const device = current_device();
        nb::object owner;
        cudaMemPool_t pool = pool_arg(pool_handle, owner, device);
        owned_view view{pool, owner};
        py_owned const* held = view.extra().get();
        init_resource(self, device_resource{std::move(view)}, device);
        // The owner is the resource's own (every copy of the view shares it).
        if (held != nullptr) { self->own_refs.push_back(held); }
      },
      nb::arg("pool_handle"),
      nb::sig("def __init__(self, pool_handle: typing.SupportsInt | typing.SupportsIndex | "
              "nbrmm._typing.HasPoolHandle) -> None"))
    .def(
      "pool_handle",
      method<CudaAsyncViewMemoryResource>("pool_handle", [](CudaAsyncViewMemoryResource& self) {
        device_resource& res = self.get();
        if (auto const* view = cuda::mr::resource_cast<owned_view>(&res)) {
          return reinterpret_cast<std::uintptr_t>(view->inner().pool_handle());
        }
        return reinterpret_cast<std::uintptr_t>(resource_as<view_resource>(self).pool_handle());
      }),
      "The ``cudaMemPool_t`` this resource allocates from, as an int.");
  register_typed_wrapper<CudaAsyncViewMemoryResource, owned_view>();
  register_typed_wrapper<CudaAsyncViewMemoryResource, view_resource>();
  register_gpu_resource_type(nb::type<CudaAsyncViewMemoryResource>());
}

}  // namespace nbrmm
