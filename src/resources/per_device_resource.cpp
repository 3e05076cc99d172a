// The current / per-device resource (rmm/mr/per_device_resource.hpp).
//
// librmm's per-device map is the only record. Python writes an owning entry that also
// carries the Python object it was set from (python_owned_resource), so that reading the
// map back returns that very object; entries written by C++ are wrapped on read.
#include "bindings.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "resources/per_device_map.hpp"
#include "resources/resource.hpp"
#include "resources/waiting_frees.hpp"
#include "core/rmm_compat.hpp"

#include <map>
#include <string>
#include <vector>

namespace nbrmm {
namespace {

/// A device argument that accepts the current device (-1 without a GPU) and every existing
/// device; messages name `param`.
int map_device_arg(nb::handle obj, char const* param)
{
  int const device = int_arg(obj, param);
  if (device != current_device()) { check_device(device, param); }
  return device;
}

/// The last wrapper made for each device's C++-set entry, as a weak reference (a raw
/// PyObject*: released at interpreter exit, never by a static destructor). Reading the same
/// entry again returns the same wrapper while it is alive.
std::map<int, PyObject*>& wrapper_cache()
{
  static std::map<int, PyObject*> cache;
  return cache;
}

nb::object cached_wrapper(int device, device_resource const& entry)
{
  auto& cache = wrapper_cache();
  auto it     = cache.find(device);
  if (it == cache.end()) { return {}; }
  PyObject* obj = PyWeakref_GetObject(it->second);  // borrowed
  if (obj == nullptr || obj == Py_None) { return {}; }
  auto& r = *nb::inst_ptr<DeviceMemoryResource>(obj);
  if (!r.res.has_value() || !(r.res == entry)) { return {}; }
  return nb::borrow(obj);
}

void remember_wrapper(int device, nb::handle obj)
{
  PyObject* ref = PyWeakref_NewRef(obj.ptr(), nullptr);
  if (ref == nullptr) {
    PyErr_Clear();
    return;
  }
  auto& cache = wrapper_cache();
  auto [it, inserted] = cache.try_emplace(device, ref);
  if (!inserted) {
    Py_DECREF(it->second);
    it->second = ref;
  }
}

/// Reads the map entry of `device` (creating librmm's initial entry if there is none),
/// returning the Python object it was set from or a wrapper of the C++ resource.
nb::object resource_of(int device)
{
  device_resource entry = device_map::get(device);
  if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&entry)) {
    if (owned->owner().is_valid()) { return nb::borrow(owned->owner()); }
  }
  if (nb::object cached = cached_wrapper(device, entry); cached.is_valid()) { return cached; }
  nb::object obj = wrap_resource(entry, device);
  remember_wrapper(device, obj);
  return obj;
}

/// Writes `entry` into the map and frees the previous entry without holding the GIL.
void replace_entry(int device, device_resource entry)
{
  device_resource old = device_map::exchange(device, std::move(entry));
  gil_release release;
  old = device_resource{};
}

void set_resource(int device, nb::handle mr)
{
  DeviceMemoryResource& r = resource_arg(mr, "mr");
  if (r.device >= 0 && r.device != device) {
    throw nb::value_error(("mr: the resource was created on device " + std::to_string(r.device) +
                           " and cannot serve device " + std::to_string(device))
                            .c_str());
  }
  // A wrapper of a resource that C++ created goes back exactly as C++ made it (so C++ can
  // still resource_cast it), and is remembered (weakly) as the wrapper of the new entry, so
  // that reading the map gives back this very object while it lives; any other resource
  // carries its Python object.
  if (r.from_cpp) {
    replace_entry(device, r.get());
    remember_wrapper(device, mr);
    return;
  }
  replace_entry(device, device_resource{python_owned_resource{r.get(), mr, true}});
}

/// Whether release_python_objects ran (nbrmm's atexit handler).
bool released_at_exit = false;

/// Removes every Python object from librmm's map and from every C++ copy of a resource (at
/// interpreter exit): entries set from Python keep serving C++ through their C++ resource;
/// Python-implemented resources are replaced by librmm's initial resource.
void release_python_objects()
{
  released_at_exit = true;
  history::clear();  // stops recording; lets go of the code objects it refers to
  std::vector<device_resource> dropped;
  device_map::for_each([&dropped](int, device_resource& entry) {
    auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&entry);
    if (owned == nullptr) { return; }
    device_resource inner = owned->inner();
    if (cuda::mr::resource_cast<python_resource>(&inner) != nullptr) {
      inner = device_map::initial();
    }
    dropped.push_back(std::exchange(entry, std::move(inner)));
  });
  dropped.clear();
  for (auto& [device, ref] : wrapper_cache()) { Py_DECREF(ref); }
  wrapper_cache().clear();
  // Whatever C++ still holds (adaptors and bins inside those resources, torch slots,
  // other libraries' statics) lets go of its Python objects too.
  py_owned::release_all([](PyObject* owner) noexcept {
    // A resource object that owns memory a C++ resource uses: its C++ part stays (for good).
    if (!is_resource(owner)) { return false; }
    auto& r = *nb::inst_ptr<DeviceMemoryResource>(owner);
    if (!r.res.has_value()) { return true; }
    try {
      static auto* kept = new std::vector<device_resource>;
      kept->push_back(r.res);
      return true;
    } catch (...) {
      return false;
    }
  });
  release_raw_allocation_owners();
  forget_python_memory_error();
}

/// Runs release_python_objects again once every atexit handler has run: what an atexit
/// handler that runs after nbrmm's (one registered before nbrmm was imported) set current
/// or gave to C++ is let go of too. It is the destructor of a capsule that only the
/// module's namespace holds, which CPython clears after the atexit handlers and before
/// nanobind's leak check; it does nothing unless nbrmm's atexit handler ran first (the
/// attribute deleted earlier).
void release_after_atexit(void*) noexcept
{
  if (!released_at_exit) { return; }
  try {
    waiting_frees::perform();
    release_python_objects();
  } catch (...) {
    // Nothing can be reported this late; what stays is what nanobind reports.
  }
}

}  // namespace

nb::object resource_or_current(nb::handle mr, char const* param)
{
  if (mr.is_none()) { return resource_of(current_device()); }
  resource_arg(mr, param);
  return nb::borrow(mr);
}

void bind_per_device_resource(nb::module_& m)
{
  m.def(
    "get_per_device_resource",
    [](nb::handle device) { return resource_of(map_device_arg(device, "device")); },
    nb::arg("device").none(), nb::sig("def get_per_device_resource(device: int) -> DeviceMemoryResource"),
    R"doc(The resource of ``device`` in librmm's per-device map.

Returns the object that was set (from Python), or an nbrmm object for the resource that
C++ code set: an instance of the concrete nbrmm class when nbrmm knows the type,
otherwise a generic ``DeviceMemoryResource``.

Parameters
----------
device : int
    The device id.

Raises
------
ValueError
    If the device does not exist.
nbrmm.CudaUnavailableError
    If ``device`` is not the current device and there is no usable CUDA driver or GPU.)doc");

  m.def(
    "set_per_device_resource",
    [](nb::handle device, nb::handle mr) { set_resource(map_device_arg(device, "device"), mr); },
    nb::arg("device").none(), nb::arg("mr"),
    nb::sig("def set_per_device_resource(device: int, mr: DeviceMemoryResource) -> None"),
    R"doc(Set the resource of ``device`` in librmm's per-device map.

C++ code that reads the map (``rmm::mr::get_per_device_resource_ref``) sees it at once.
The map owns the resource (and the Python object) until it is replaced.

Parameters
----------
device : int
    The device id.
mr : DeviceMemoryResource
    The resource; it must have been created on ``device``.

Raises
------
TypeError
    If ``mr`` is not a resource.
ValueError
    If the device does not exist or ``mr`` was created on another device.
nbrmm.CudaUnavailableError
    If ``device`` is not the current device and there is no usable CUDA driver or GPU.)doc");

  m.def(
    "get_current_device_resource", []() { return resource_of(current_device()); },
    nb::sig("def get_current_device_resource() -> DeviceMemoryResource"),
    R"doc(The resource of the current device in librmm's per-device map.

The same as ``get_per_device_resource(current device)``: whatever Python or C++ set last.)doc");

  m.def(
    "set_current_device_resource", [](nb::handle mr) { set_resource(current_device(), mr); },
    nb::sig("def set_current_device_resource(mr: DeviceMemoryResource) -> None"),
    nb::arg("mr"), R"doc(Set the resource of the current device in librmm's per-device map.

Parameters
----------
mr : DeviceMemoryResource
    The resource; it must have been created on the current device.)doc");

  m.def(
    "reset_per_device_resource",
    [](nb::handle device) {
      replace_entry(map_device_arg(device, "device"), device_map::initial());
    },
    nb::arg("device").none(), nb::sig("def reset_per_device_resource(device: int) -> None"),
    "Restore librmm's initial resource (a ``CudaMemoryResource``) for ``device``.");

  m.def(
    "is_initialized",
    []() { return device_map::contains(current_device()); },
    "Whether librmm's per-device map has an entry for the current device.");

  m.def("_release_python_objects", &release_python_objects,
        "Remove Python objects from librmm's per-device map (run at interpreter exit).");
  static int release_tag = 0;  // a capsule needs a non-null pointer
  m.attr("_release_after_atexit") = nb::capsule(&release_tag, &release_after_atexit);
}

}  // namespace nbrmm
