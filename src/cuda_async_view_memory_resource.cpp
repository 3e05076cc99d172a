// nbrmm.mr.CudaAsyncViewMemoryResource (rmm/mr/cuda_async_view_memory_resource.hpp):
// cudaMallocFromPoolAsync on an existing CUDA memory pool that it does not own.
#include "adaptor.hpp"

#include <rmm/mr/cuda_async_view_memory_resource.hpp>

#include <cstdint>
#include <string>

namespace nbrmm {
namespace {

using view_resource = rmm::mr::cuda_async_view_memory_resource;

struct CudaAsyncViewMemoryResource : DeviceMemoryResource {};

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
  if (PyLong_Check(obj.ptr())) {
    value = nb::borrow(obj);
  } else if (nb::hasattr(obj, "pool_handle") && PyCallable_Check(obj.attr("pool_handle").ptr())) {
    if (nb::isinstance<DeviceMemoryResource>(obj)) { resource_on_device(obj, "pool_handle", device); }
    value = obj.attr("pool_handle")();
    owner = nb::borrow(obj);
  } else if (PyIndex_Check(obj.ptr()) || nb::hasattr(obj, "__int__")) {
    value = nb::steal(PyNumber_Long(obj.ptr()));
    if (!value.is_valid()) { throw nb::python_error(); }
    owner = nb::borrow(obj);
  } else {
    throw nb::value_error(("pool_handle: expected a cudaMemPool_t, CUmemoryPool, int or an "
                          "object with pool_handle(), got " +
                          std::string{nb::type_name(obj.type()).c_str()})
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
    passed is kept alive by this resource; the pool itself must outlive every use of
    the resource, including C++ copies of it (they do not own the pool).)doc")
    .def(
      "__init__",
      [](CudaAsyncViewMemoryResource* self, nb::handle pool_handle) {
        int const device = current_device();
        nb::object owner;
        cudaMemPool_t pool = pool_arg(pool_handle, owner, device);
        init_resource(self, make_resource([&] { return view_resource{pool}; }, false), device);
        self->keep = std::move(owner);
      },
      nb::arg("pool_handle"),
      nb::sig("def __init__(self, pool_handle: object) -> None"))
    .def(
      "pool_handle",
      [](CudaAsyncViewMemoryResource& self) {
        return reinterpret_cast<std::uintptr_t>(resource_as<view_resource>(self).pool_handle());
      },
      "The ``cudaMemPool_t`` this resource allocates from, as an int.");
  register_typed_wrapper<CudaAsyncViewMemoryResource, view_resource>();
}

}  // namespace nbrmm
