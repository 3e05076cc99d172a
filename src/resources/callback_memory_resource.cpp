// nbrmm.mr.CallbackMemoryResource (rmm/mr/callback_memory_resource.hpp): allocation by
// Python callables. Unlike rmm, the callables are owned by the C++ resource itself, so
// any C++ copy of it (in a buffer, an adaptor, the per-device map, another extension)
// keeps them alive and can never call a freed Python object.
#include "resources/adaptor.hpp"

#include <string>

namespace nbrmm {
namespace {

struct CallbackMemoryResource : DeviceMemoryResource {};

void require_callable(nb::handle fn, char const* param)
{
  if (!PyCallable_Check(fn.ptr())) {
    throw nb::type_error((std::string{param} + ": expected a callable, got " +
                          type_of(fn))
                           .c_str());
  }
}

}  // namespace

void bind_callback_memory_resource(nb::module_& m)
{
  resource_class<CallbackMemoryResource>(m, "CallbackMemoryResource", R"doc(
A memory resource that allocates and frees through Python callables.

Parameters
----------
allocate_func : callable
    ``allocate_func(nbytes: int, stream: Stream) -> int`` returns a pointer; it may raise
    (``MemoryError`` for a failed allocation), and the exception reaches the Python code
    whose call triggered the allocation.
deallocate_func : callable
    ``deallocate_func(ptr: int, nbytes: int, stream: Stream) -> None``. Exceptions are
    reported as unraisable (a deallocation cannot fail).

Notes
-----
Both callables are owned by the C++ resource and every C++ copy of it; they run with the
GIL held. The memory is treated as device-accessible.)doc")
    .def(
      "__init__",
      [](CallbackMemoryResource* self, nb::handle allocate_func, nb::handle deallocate_func) {
        init_guard const guard{self};
        require_callable(allocate_func, "allocate_func");
        require_callable(deallocate_func, "deallocate_func");
        python_resource py{allocate_func, deallocate_func, "allocate_func"};
        new (self) CallbackMemoryResource{};
        self->device       = current_device();
        self->callback_key = py.state_ptr();
        self->calls_python = true;
        self->res          = device_resource{std::move(py)};
      },
      nb::arg("allocate_func"), nb::arg("deallocate_func"),
      nb::sig("def __init__(self, "
              "allocate_func: collections.abc.Callable[[int, Stream], int], "
              "deallocate_func: collections.abc.Callable[[int, int, Stream], None]) -> None"))
    .def_prop_ro(
      "allocate_func",
      getter<CallbackMemoryResource>("allocate_func",
                                     [](CallbackMemoryResource& self) {
                                       auto const* py =
                                         cuda::mr::resource_cast<python_resource>(&self.get());
                                       return nb::borrow(py->callbacks().allocate.get());
                                     }),
      nb::for_getter(nb::sig(
        "def allocate_func(self, /) -> collections.abc.Callable[[int, Stream], int]")),
      "The allocation callable.")
    .def_prop_ro(
      "deallocate_func",
      getter<CallbackMemoryResource>("deallocate_func",
                                     [](CallbackMemoryResource& self) {
                                       auto const* py =
                                         cuda::mr::resource_cast<python_resource>(&self.get());
                                       return nb::borrow(py->callbacks().deallocate.get());
                                     }),
      nb::for_getter(nb::sig(
        "def deallocate_func(self, /) -> collections.abc.Callable[[int, int, Stream], None]")),
      "The deallocation callable.");

  register_wrapper([](device_resource const& res, int device) -> nb::object {
    auto const* py = cuda::mr::resource_cast<python_resource>(&res);
    if (py == nullptr) { return nb::object{}; }
    nb::object obj = make_resource_object<CallbackMemoryResource>(res, device);
    nb::inst_ptr<CallbackMemoryResource>(obj)->callback_key = py->state_ptr();
    return obj;
  });
}

}  // namespace nbrmm
