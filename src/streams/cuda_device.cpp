// Device queries of rmm/cuda_device.hpp. None of these abort without a GPU: they either
// report "no device" (-1 / 0) or raise nbrmm.CudaError.
#include "bindings.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "core/rmm_compat.hpp"

#include <rmm/cuda_device.hpp>

#include <string>

namespace nbrmm {

int device_count() noexcept
{
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

namespace {

int cached_device_count() noexcept
{
  static int const count = device_count();
  return count;
}

}  // namespace

int current_device()
{
  if (cached_device_count() == 1) { return 0; }
  return rmm::get_current_cuda_device().value();
}

bool multiple_devices() noexcept { return cached_device_count() > 1; }

void check_device(int device, char const* param)
{
  int const count = device_count();
  // Without a usable GPU, no device number is right: that is what to say.
  if (device >= 0 && count == 0) {
    require_gpu((std::string{param} + ": device " + std::to_string(device)).c_str());
  }
  if (device < 0 || device >= count) {
    throw nb::value_error((std::string{param} + ": device " + std::to_string(device) +
                           " does not exist (this machine has " + std::to_string(count) +
                           " CUDA device" + (count == 1 ? "" : "s") + ")")
                            .c_str());
  }
}

int device_arg(nb::handle obj, char const* param)
{
  int const device = int_arg(obj, param);
  check_device(device, param);
  return device;
}

void require_gpu(char const* what)
{
  int count = 0;
  cudaError_t const status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) { return; }
  cudaGetLastError();
  std::string reason = status == cudaSuccess ? std::string{"no CUDA device is visible"}
                                             : std::string{cudaGetErrorString(status)} + " (" +
                                                 cudaGetErrorName(status) + ")";
  throw no_gpu_error{std::string{what} + " needs a GPU, and there is no usable CUDA driver " +
                     "or GPU: " + reason};
}

void bind_cuda_device(nb::module_& m)
{
  m.def("get_device_count", &device_count,
        R"doc(Number of CUDA devices visible to this process.

Returns
-------
int
    0 when there is no GPU or no usable driver (never raises).)doc");

  m.def(
    "get_current_device", []() { return current_device(); },
    R"doc(The current CUDA device of the calling thread, as librmm reports it.

Returns
-------
int
    The device id, or -1 when there is no usable GPU.)doc");

  m.def(
    "set_current_device",
    [](nb::handle device_obj) {
      int const device = device_arg(device_obj, "device");
      gil_release release;
      check_cuda(cudaSetDevice(device), "cudaSetDevice");
    },
    nb::arg("device").none(), nb::sig("def set_current_device(device: int) -> None"),
    R"doc(Make ``device`` the current CUDA device of the calling thread.

Raises
------
ValueError
    If the device does not exist.
nbrmm.CudaUnavailableError
    Without a usable CUDA driver or GPU.)doc");

  m.def(
    "available_device_memory",
    [](nb::handle device_obj) {
      if (!device_obj.is_none()) {
        int const device = device_arg(device_obj, "device");
        gil_release release;
        device_scope const on_device{device};
        return rmm::available_device_memory();
      }
      try {
        gil_release release;
        return rmm::available_device_memory();
      } catch (rmm::cuda_error const&) {
        require_gpu("available_device_memory()");  // says so when there is no GPU
        throw;
      }
    },
    nb::arg("device") = nb::none(),
    nb::sig("def available_device_memory(device: int | None = None) -> tuple[int, int]"),
    R"doc(Free and total memory of a device.

Parameters
----------
device : int, optional
    The device to query; the current device when omitted.

Returns
-------
tuple[int, int]
    ``(free, total)`` in bytes.

Raises
------
nbrmm.CudaError
    Without a usable GPU.)doc");

  m.def(
    "get_device_info",
    [](nb::handle device_obj) {
      int const device = device_arg(device_obj, "device");
      cudaDeviceProp prop{};
      check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      nb::dict info;
      info["name"]               = std::string{prop.name};
      info["total_memory"]       = prop.totalGlobalMem;
      info["compute_capability"] = nb::make_tuple(prop.major, prop.minor);
      info["multiprocessors"]    = prop.multiProcessorCount;
      info["pci_bus_id"]         = prop.pciBusID;
      return info;
    },
    nb::arg("device").none(), nb::sig("def get_device_info(device: int) -> nbrmm._typing.DeviceInfo"),
    R"doc(Name, memory and compute capability of a device.

Returns
-------
dict
    Keys ``name``, ``total_memory``, ``compute_capability``, ``multiprocessors``,
    ``pci_bus_id``.)doc");

  m.def(
    "_require_gpu", [](std::string const& what) { require_gpu(what.c_str()); }, nb::arg("what"),
    "Raise nbrmm.CudaUnavailableError (\"<what> needs a GPU, and ...\") without a usable GPU.");

  m.def(
    "get_versions",
    []() {
      int driver = 0;
      int runtime = 0;
      if (cudaDriverGetVersion(&driver) != cudaSuccess) { driver = 0; }
      if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) { runtime = 0; }
      cudaGetLastError();
      nb::dict v;
      v["cuda_driver"]  = driver;
      v["cuda_runtime"] = runtime;
      v["nanobind"]     = NB_VERSION_MAJOR * 10000 + NB_VERSION_MINOR * 100 + NB_VERSION_PATCH;
      return v;
    },
    nb::sig("def get_versions() -> nbrmm._typing.Versions"),
    R"doc(Versions of the CUDA driver and runtime nbrmm runs with.

Returns
-------
dict
    ``cuda_driver`` and ``cuda_runtime`` as CUDA encodes them (e.g. 13000), 0 when
    unavailable, and ``nanobind``.)doc");
}

}  // namespace nbrmm
