// CUDA devices: the current device, the device count, and making a device current.
#pragma once

#include "core/common.hpp"

#include <optional>

namespace nbrmm {

/// The current CUDA device as librmm reports it (-1 without a usable GPU). With exactly
/// one device (the count is fixed once CUDA is initialised) it is 0 without asking CUDA.
int current_device();

/// Whether this process sees more than one CUDA device.
bool multiple_devices() noexcept;

/// Number of CUDA devices (0 without a usable GPU or driver; never raises).
int device_count() noexcept;

/// Raises ValueError naming `param` unless `device` is an existing device id (without a
/// usable GPU, nbrmm.CudaUnavailableError for any device id from 0 up).
void check_device(int device, char const* param);

/// A device id argument: an int (TypeError, or ArgumentRangeError outside the range of a C
/// `int`) that names an existing device (ValueError); messages name `param`.
int device_arg(nb::handle obj, char const* param);

/// Raises nbrmm.CudaError ("no usable CUDA driver or GPU") when this process has no usable
/// GPU; `what` names what needs one.
void require_gpu(char const* what);

/// Makes `device` (-1: unknown) current for its lifetime where the process sees several
/// devices; with one, that device is current already and nothing is asked of CUDA.
class device_scope {
 public:
  explicit device_scope(int device)
  {
    if (device >= 0 && multiple_devices()) { guard_.emplace(rmm::cuda_device_id{device}); }
  }

 private:
  std::optional<rmm::cuda_set_device_raii> guard_;
};

}  // namespace nbrmm
