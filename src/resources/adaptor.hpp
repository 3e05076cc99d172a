// Helpers shared by the files that bind librmm's resources and adaptors: argument checks,
// construction of a resource object in place, wrappers that turn a C++ resource back
// into the right Python class, and `holder_resource`, which keeps a librmm resource
// together with what it refers to but does not own.
#pragma once

#include "core/args.hpp"
#include "bindings.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "resources/resource.hpp"

#include <memory>
#include <string>
#include <utility>

namespace nbrmm {

/// Returns the resource behind `obj` (TypeError naming `param` otherwise) and checks that
/// it was created on `device` (ValueError naming `param` otherwise).
inline DeviceMemoryResource& resource_on_device(nb::handle obj, char const* param, int device)
{
  DeviceMemoryResource& r = resource_arg(obj, param);
  if (r.device != device) {
    throw nb::value_error((std::string{param} + ": the resource was created on device " +
                           std::to_string(r.device) + " but the current device is " +
                           std::to_string(device))
                            .c_str());
  }
  r.get();  // a resource cleared by the garbage collector cannot serve anything
  return r;
}

/// Without a usable GPU, refuses (nbrmm.CudaUnavailableError) to build `what`, a resource
/// that takes memory from `upstream_mr` ahead of its allocations (a pool, an arena, blocks
/// of a fixed size), over a resource that allocates with CUDA: that memory can never come,
/// and librmm would report the failure in its own words (a pool also logs it to stderr).
inline void require_gpu_for(nb::handle upstream_mr, char const* what)
{
  if (device_count() > 0) { return; }
  std::string const below = gpu_resource_below(upstream_mr);
  if (!below.empty()) { require_gpu((std::string{what} + " over " + below).c_str()); }
}

/// Finishes the `__init__` of a resource that has no upstream: `self` is raw memory.
template <class Py>
void init_resource(Py* self, device_resource res, int device, bool host_accessible = false)
{
  new (self) Py{};
  self->device          = device;
  self->host_accessible = host_accessible;
  self->res             = std::move(res);
}

/// Binds `Py`, a resource without parameters that holds a default-constructed librmm
/// `Cpp`, and registers its wrapper. `NeedsGpu`: the constructor asks the CUDA driver.
template <class Py, class Cpp, bool HostAccessible, bool NeedsGpu = false>
nb::class_<Py, DeviceMemoryResource> bind_plain_resource(nb::handle scope,
                                                         char const* name,
                                                         char const* doc)
{
  auto cls = resource_class<Py>(scope, name, doc);
  cls.def(
    "__init__",
    [name](Py* self) {
      init_guard const guard{self};
      if constexpr (NeedsGpu) { require_gpu(name); }
      int const device = current_device();
      init_resource(self, device_resource{Cpp{}}, device, HostAccessible);
    },
    "Create a resource on the current device.");
  register_typed_wrapper<Py, Cpp, HostAccessible>();
  register_gpu_resource_type(cls);  // managed, pinned and system memory: CUDA allocates
  return cls;
}

/// Runs `make()` (which creates a librmm resource) without the GIL when `release_gil`.
template <class Make>
device_resource make_resource(Make&& make, bool release_gil)
{
  if (!release_gil) { return device_resource{make()}; }
  librmm_call call;
  return device_resource{make()};
}

/// The `__init__` of an adaptor: checks `upstream_mr` (a resource of the current device),
/// builds the librmm adaptor with `make(owned copy of the upstream)`, without the GIL
/// when `release_gil` (constructors that allocate), and keeps the Python upstream object.
/// Memory from an adaptor is host-accessible when its upstream's is.
template <class Py, class Make>
void init_adaptor(Py* self, nb::handle upstream_mr, Make&& make, bool release_gil = false)
{
  int const device         = current_device();
  DeviceMemoryResource& up = resource_on_device(upstream_mr, "upstream_mr", device);
  check_reentry(upstream_mr, "upstream_mr");
  bool const host          = up.host_accessible;
  device_resource copy     = up.owned_copy(upstream_mr);
  Py made{};
  made.adopt(up, copy);
  device_resource res = make_resource(
    [&, upstream = std::move(copy)]() mutable { return make(std::move(upstream)); }, release_gil);
  new (self) Py(std::move(made));
  self->device          = device;
  self->host_accessible = host;
  self->upstream        = nb::borrow(upstream_mr);
  self->res             = std::move(res);
}

/// The C++ object of type `Cpp` held by `self`, for the methods of its bound class.
template <class Cpp>
Cpp& resource_as(DeviceMemoryResource& self)
{
  auto* p = cuda::mr::resource_cast<Cpp>(&self.get());
  if (p == nullptr) {
    throw nb::type_error("the resource does not hold the librmm type of its class");
  }
  return *p;
}

/// The default last step of an adaptor wrapper: nothing to add.
struct no_finish {
  template <class Cpp, class Py>
  void operator()(Cpp const&, Py&, int) const noexcept
  {
  }
};

/// Registers a wrapper for an adaptor type `Cpp` (a librmm adaptor with
/// `get_upstream_resource()`, or a holder_resource of one): the Python object gets an
/// `upstream_mr` that wraps (and shares) the C++ upstream; then `Finish{}(cpp, obj,
/// device)` adds what else the class keeps.
template <class Py, class Cpp, class Finish = no_finish>
void register_adaptor_wrapper()
{
  register_wrapper([](device_resource const& res, int device) -> nb::object {
    auto const* cpp = cuda::mr::resource_cast<Cpp>(&res);
    if (cpp == nullptr) { return nb::object{}; }
    device_resource upstream;
    if constexpr (requires { cpp->inner(); }) {
      upstream = device_resource{cpp->inner().get_upstream_resource()};
    } else {
      upstream = device_resource{cpp->get_upstream_resource()};
    }
    nb::object up   = wrap_resource(upstream, device);
    bool const host = nb::inst_ptr<DeviceMemoryResource>(up)->host_accessible;
    nb::object obj  = make_resource_object<Py>(res, device, std::move(up), host);
    Finish{}(*cpp, *nb::inst_ptr<Py>(obj), device);
    return obj;
  });
}

/// A resource that owns a librmm resource `Inner` together with `Extra`: what `Inner`
/// refers to without owning it (bin resources, Python callables). Copies share both;
/// `Inner` is destroyed before `Extra`.
template <class Inner, class Extra>
class holder_resource : public forwarding_resource<holder_resource<Inner, Extra>> {
 public:
  struct state {
    template <class... Args>
    explicit state(Extra extra_, Args&&... args)
      : extra{std::move(extra_)}, inner{std::forward<Args>(args)...}
    {
    }
    Extra extra;
    Inner inner;
  };

  template <class... Args>
  explicit holder_resource(Extra extra, Args&&... args)
    : state_{std::make_shared<state>(std::move(extra), std::forward<Args>(args)...)}
  {
  }

  bool operator==(holder_resource const& o) const noexcept { return state_ == o.state_; }

  [[nodiscard]] Inner& target() noexcept { return state_->inner; }
  [[nodiscard]] Inner& inner() const noexcept { return state_->inner; }
  [[nodiscard]] Extra& extra() const noexcept { return state_->extra; }
  /// How many resource handles share this state (1: only the one asked).
  [[nodiscard]] long use_count() const noexcept { return state_.use_count(); }

 private:
  std::shared_ptr<state> state_;
};

}  // namespace nbrmm
