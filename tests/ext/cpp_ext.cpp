// A C++ extension that is not nbrmm: it uses librmm directly, owns its own resources,
// reads and writes librmm's per-device map, and exchanges resources and buffers with
// nbrmm only through the public header <nbrmm/nbrmm.hpp>.
#include <nanobind/nanobind.h>

#include <nbrmm/nbrmm.hpp>

#include <rmm/cuda_device.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/mr/callback_memory_resource.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>

namespace nb = nanobind;

namespace {

// Host memory, 256-byte aligned as librmm's resources are: lets the C++ side allocate on
// machines without a GPU.
void* host_allocate(std::size_t bytes, cuda::stream_ref, void*)
{
  return std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
}
void host_deallocate(void* ptr, std::size_t, cuda::stream_ref, void*) { std::free(ptr); }

/// The statistics adaptor this extension owns (set as current by set_current_owned()).
std::optional<rmm::mr::statistics_resource_adaptor>& owned_stats()
{
  static std::optional<rmm::mr::statistics_resource_adaptor> stats;
  return stats;
}

std::optional<cuda::mr::any_resource<cuda::mr::device_accessible>>& held_resource()
{
  static std::optional<cuda::mr::any_resource<cuda::mr::device_accessible>> held;
  return held;
}

cuda::stream_ref default_stream() { return cuda::stream_ref{cudaStream_t{nullptr}}; }

nb::object hand_back(rmm::device_buffer&& buf)
{
  PyObject* obj = nbrmm::buffer_to_python(std::move(buf));
  if (obj == nullptr) { throw nb::python_error(); }
  return nb::steal(obj);
}

}  // namespace

NB_MODULE(cpp_ext, m)
{
  m.def(
    "set_current_owned",
    [](bool on_gpu) {
      // A resource that only C++ owns: statistics over malloc (CPU) or over a CUDA pool (GPU).
      if (on_gpu) {
        rmm::mr::pool_memory_resource pool{rmm::mr::cuda_memory_resource{}, 1 << 20};
        owned_stats().emplace(cuda::mr::any_resource<cuda::mr::device_accessible>{pool});
      } else {
        rmm::mr::callback_memory_resource host{host_allocate, host_deallocate};
        owned_stats().emplace(cuda::mr::any_resource<cuda::mr::device_accessible>{host});
      }
      rmm::mr::set_current_device_resource(
        cuda::mr::any_resource<cuda::mr::device_accessible>{*owned_stats()});
    },
    nb::arg("on_gpu"), "Set the current device resource, from C++, to a resource C++ owns.");

  m.def(
    "owned_counts",
    []() {
      auto const b = owned_stats()->get_bytes_counter();
      auto const a = owned_stats()->get_allocations_counter();
      return nb::make_tuple(b.value, a.value, a.total);
    },
    "(bytes in use, allocations in use, total allocations) of the C++-owned adaptor.");

  m.def(
    "current_is_owned",
    []() {
      auto ref = rmm::mr::get_current_device_resource_ref();
      return cuda::mr::resource_cast<rmm::mr::statistics_resource_adaptor>(&ref) != nullptr;
    },
    "Whether C++ sees its own adaptor as the current device resource.");

  m.def(
    "reset_current", []() { rmm::mr::reset_current_device_resource(); },
    "Restore librmm's initial resource from C++.");

  m.def(
    "allocate_from_current",
    [](std::size_t nbytes) {
      // What any C++ library does: allocate from whatever is current.
      rmm::device_buffer buf{nbytes, default_stream(), rmm::mr::get_current_device_resource_ref()};
      return hand_back(std::move(buf));
    },
    nb::arg("nbytes"),
    "Allocate an rmm::device_buffer from the current resource and hand it to Python.");

  m.def(
    "allocate_with",
    [](nb::handle mr, std::size_t nbytes) {
      auto res = nbrmm::resource_from_python(mr.ptr());
      rmm::device_buffer buf{nbytes, default_stream(), std::move(res)};
      return hand_back(std::move(buf));
    },
    nb::arg("mr").none(), nb::arg("nbytes"),
    "Allocate from an nbrmm resource received through the C++ API, hand the buffer back.");

  m.def(
    "round_trip",
    [](nb::handle mr) {
      PyObject* obj = nbrmm::resource_to_python(nbrmm::resource_from_python(mr.ptr()));
      if (obj == nullptr) { throw nb::python_error(); }
      return nb::steal(obj);
    },
    nb::arg("mr").none(),
    "An nbrmm resource to C++ and back through the C++ API (resource_from_python, then "
    "resource_to_python).");

  m.def(
    "hold_resource",
    [](nb::handle mr) { held_resource().emplace(nbrmm::resource_from_python(mr.ptr())); },
    nb::arg("mr"), "Keep a C++ copy of an nbrmm resource, beyond every Python reference.");

  m.def(
    "allocate_held",
    [](std::size_t nbytes) {
      nb::gil_scoped_release release;
      void* p = held_resource()->allocate(default_stream(), nbytes, 256);
      held_resource()->deallocate(default_stream(), p, nbytes, 256);
    },
    nb::arg("nbytes"), "Allocate and free through the held C++ copy (GIL released).");

  m.def(
    "release_held", []() { held_resource().reset(); }, "Drop the held C++ copy.");

  // A well-behaved extension drops the Python objects it holds before the interpreter
  // shuts down (see <nbrmm/nbrmm.hpp>).
  nb::module_::import_("atexit").attr("register")(m.attr("release_held"));
}
