// nbrmm.mr.BinningMemoryResource (rmm/mr/binning_memory_resource.hpp): routes each request
// to the resource of the smallest bin that fits it, or to the upstream.
//
// librmm's add_bin() keeps only a reference to a bin resource. nbrmm's binning resource
// therefore owns a copy of every bin resource beside the librmm resource (in a
// holder_resource), so that C++ copies of it keep its bins alive.
#include "resources/adaptor.hpp"
#include "core/rmm_compat.hpp"

#include <rmm/mr/binning_memory_resource.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nbrmm {
namespace {

using binning_resource = rmm::mr::binning_memory_resource;
/// Owning copies of the bin resources given to add_bin(); their addresses never change.
using owned_bins      = std::vector<std::unique_ptr<device_resource>>;
using binning_holder  = holder_resource<binning_resource, owned_bins>;

struct BinningMemoryResource : UpstreamResourceAdaptor {};

/// The largest exponent: librmm computes the bin size as an int (1 << exponent).
constexpr int max_exponent = 30;

binning_resource& binning_of(BinningMemoryResource& self)
{
  device_resource& res = self.get();
  if (auto* holder = cuda::mr::resource_cast<binning_holder>(&res)) { return holder->inner(); }
  return resource_as<binning_resource>(self);
}

nb::list bins_of(BinningMemoryResource const& self)
{
  return self.keep.is_valid() ? nb::borrow<nb::list>(self.keep) : nb::list();
}

/// Completes the wrapper of a binning resource: the Python objects of its bins.
struct wrap_bins {
  void operator()(binning_holder const& holder, BinningMemoryResource& obj, int device) const
  {
    nb::list bins;
    for (auto const& bin : holder.extra()) {
      nb::object b = wrap_resource(*bin, device);
      obj.host_accessible = obj.host_accessible && nb::inst_ptr<DeviceMemoryResource>(b)->host_accessible;
      bins.append(b);
    }
    obj.keep = std::move(bins);
  }
};

}  // namespace

void bind_binning_memory_resource(nb::module_& m)
{
  resource_class<BinningMemoryResource, UpstreamResourceAdaptor>(
    m, "BinningMemoryResource", R"doc(
Memory resource that serves each request from the bin of the smallest size that fits it.

A bin has a maximum allocation size and a resource; requests larger than every bin go
to ``upstream_mr``. With ``min_size_exponent`` and ``max_size_exponent`` the resource
starts with one ``FixedSizeMemoryResource`` bin (over ``upstream_mr``) for each power of
two from ``2**min_size_exponent`` to ``2**max_size_exponent`` bytes; :meth:`add_bin`
adds more.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource for requests larger than every bin (and of the fixed-size bins);
    created on the current device.
min_size_exponent, max_size_exponent : int, optional
    Both -1 (no initial bins, the default) or both in ``[0, 30]`` with
    ``min_size_exponent <= max_size_exponent``.

Notes
-----
Each fixed-size bin takes 128 blocks of its size from ``upstream_mr`` at once. Add bins
before the resource serves allocations: :meth:`add_bin` must not run concurrently with
allocations.)doc")
    .def(
      "__init__",
      [](BinningMemoryResource* self, nb::handle upstream_mr, nb::handle min_exponent_arg,
         nb::handle max_exponent_arg) {
        init_guard const guard{self};
        int const min_size_exponent = int_arg(min_exponent_arg, "min_size_exponent", "an exponent");
        int const max_size_exponent = int_arg(max_exponent_arg, "max_size_exponent", "an exponent");
        bool const none = min_size_exponent == -1 && max_size_exponent == -1;
        if (!none) {
          for (auto [value, name] : {std::pair{min_size_exponent, "min_size_exponent"},
                                     std::pair{max_size_exponent, "max_size_exponent"}}) {
            if (value < 0 || value > max_exponent) {
              throw_range_error(std::string{name} + ": must be in [0, " +
                                std::to_string(max_exponent) +
                                "] (or both exponents -1 for no bins), got " +
                                std::to_string(value));
            }
          }
          if (min_size_exponent > max_size_exponent) {
            throw nb::value_error(("max_size_exponent: " + std::to_string(max_size_exponent) +
                                   " is smaller than min_size_exponent (" +
                                   std::to_string(min_size_exponent) + ")")
                                    .c_str());
          }
        }
        if (!none) {  // the bins take blocks from the upstream at once
          resource_on_device(upstream_mr, "upstream_mr", current_device());
          require_gpu_for(upstream_mr, "BinningMemoryResource's bins");
        }
        init_adaptor(
          self, upstream_mr,
          [&](device_resource up) {
            if (none) { return binning_holder{owned_bins{}, std::move(up)}; }
            return binning_holder{owned_bins{}, std::move(up),
                                  static_cast<std::int8_t>(min_size_exponent),
                                  static_cast<std::int8_t>(max_size_exponent)};
          },
          true);
        self->keep = nb::list();
      },
      nb::arg("upstream_mr"), nb::arg("min_size_exponent").none() = -1,
      nb::arg("max_size_exponent").none() = -1,
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "min_size_exponent: int = -1, max_size_exponent: int = -1) -> None"))
    .def(
      "add_bin",
      [](nb::handle_t<BinningMemoryResource> py_self, nb::handle allocation_size,
         nb::handle bin_resource) {
        auto& self = initialized<BinningMemoryResource>(py_self, "add_bin");
        std::size_t const size = parse_size(allocation_size, "allocation_size");
        if (size == 0) { throw nb::value_error("allocation_size: must be positive"); }
        // A bin without a resource is a FixedSizeMemoryResource taking 128 blocks at once.
        std::size_t const most = bin_resource.is_none() ? max_request / 128 : max_request;
        if (size > most) {
          throw nb::value_error(("allocation_size: at most " + std::to_string(most) +
                                 " bytes, got " + std::to_string(size))
                                  .c_str());
        }
        binning_resource& bins = binning_of(self);
        if (bin_resource.is_none()) {
          require_gpu_for(self.upstream, "a bin of fixed-size blocks");
          gil_release release;
          bins.add_bin(size);
          return;
        }
        DeviceMemoryResource& bin = resource_on_device(bin_resource, "bin_resource", self.device);
        if (depends_on(bin_resource, py_self)) {
          throw nb::value_error(
            "bin_resource: the resource is this BinningMemoryResource or depends on it; a "
            "resource cannot be its own upstream");
        }
        auto* holder = cuda::mr::resource_cast<binning_holder>(&self.get());
        if (holder == nullptr) {
          throw nb::type_error(
            "bin_resource: this binning resource was created by C++ code, which cannot own "
            "its bins; add bins with a resource only to a BinningMemoryResource made in Python");
        }
        device_resource copy = bin.owned_copy(bin_resource);
        self.adopt(bin, copy);
        holder->extra().push_back(std::make_unique<device_resource>(std::move(copy)));
        bins.add_bin(size, rmm::device_async_resource_ref{*holder->extra().back()});
        bins_of(self).append(bin_resource);
        self.host_accessible = self.host_accessible && bin.host_accessible;
      },
      nb::arg("allocation_size"), nb::arg("bin_resource") = nb::none(), nb::lock_self(),
      nb::sig("def add_bin(self, allocation_size: int | str, "
              "bin_resource: DeviceMemoryResource | None = None) -> None"),
      R"doc(Add a bin for requests of at most ``allocation_size`` bytes.

Requests larger than the next smaller bin and no larger than ``allocation_size``
(rounded up to a multiple of 256) go to this bin.

Parameters
----------
allocation_size : int or str
    The largest request the bin serves.
bin_resource : DeviceMemoryResource, optional
    The bin's resource; by default a new ``FixedSizeMemoryResource`` of blocks of
    ``allocation_size`` bytes over ``upstream_mr``. The binning resource (and every C++
    copy of it) keeps the bin resource alive. A second bin of the same size with a
    resource replaces nothing: the first one stays.)doc")
    .def_prop_ro(
      "bin_mrs",
      getter<BinningMemoryResource>("bin_mrs",
                                    [](BinningMemoryResource const& self) {
                                      return nb::steal<nb::list>(
                                        PySequence_List(bins_of(self).ptr()));
                                    }),
      nb::for_getter(nb::sig("def bin_mrs(self, /) -> list[DeviceMemoryResource]")),
      "The resources given to :meth:`add_bin`, in order (a new list).");

  // nbrmm's own binning resources come back with their bins; those made by C++ without.
  register_adaptor_wrapper<BinningMemoryResource, binning_holder, wrap_bins>();
  register_adaptor_wrapper<BinningMemoryResource, binning_resource>();
}

}  // namespace nbrmm
