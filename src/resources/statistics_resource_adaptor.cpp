// nbrmm.mr.StatisticsResourceAdaptor (rmm/mr/statistics_resource_adaptor.hpp): counts the
// bytes and allocations that pass through it, with a stack of counter frames.
#include "resources/adaptor.hpp"

#include <rmm/mr/statistics_resource_adaptor.hpp>

#include <atomic>
#include <utility>

namespace nbrmm {
namespace {

using statistics_adaptor = rmm::mr::statistics_resource_adaptor;
using counter            = statistics_adaptor::counter;

struct StatisticsResourceAdaptor : UpstreamResourceAdaptor {};

/// nbrmm.statistics.Statistics, imported on first use (kept for the life of the process).
nb::handle statistics_class()
{
  static std::atomic<PyObject*> cls{nullptr};
  PyObject* p = cls.load(std::memory_order_acquire);
  if (p == nullptr) {
    nb::object c = nb::module_::import_("nbrmm.statistics").attr("Statistics");
    PyObject* expected = nullptr;
    if (cls.compare_exchange_strong(expected, c.ptr())) { c.release(); }
    p = cls.load(std::memory_order_acquire);
  }
  return p;
}

nb::object to_statistics(counter const& bytes, counter const& count)
{
  return statistics_class()(nb::arg("current_bytes") = bytes.value,
                            nb::arg("current_count") = count.value,
                            nb::arg("peak_bytes")    = bytes.peak,
                            nb::arg("peak_count")    = count.peak,
                            nb::arg("total_bytes")   = bytes.total,
                            nb::arg("total_count")   = count.total);
}

}  // namespace

void bind_statistics_resource_adaptor(nb::module_& m)
{
  resource_class<StatisticsResourceAdaptor, UpstreamResourceAdaptor>(
    m, "StatisticsResourceAdaptor", R"doc(
Adaptor that counts the bytes and allocations that pass through it.

It keeps current, peak and total counts of bytes and of allocations, in a stack of
frames: :meth:`push_counters` starts a fresh frame and :meth:`pop_counters` ends it,
adding its counts to the frame below.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.)doc")
    .def(
      "__init__",
      [](StatisticsResourceAdaptor* self, nb::handle upstream_mr) {
        init_guard const guard{self};
        init_adaptor(self, upstream_mr,
                     [](device_resource up) { return statistics_adaptor{std::move(up)}; });
      },
      nb::arg("upstream_mr"), nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource) -> None"))
    .def_prop_ro(
      "allocation_counts",
      getter<StatisticsResourceAdaptor>("allocation_counts",
                                        [](StatisticsResourceAdaptor& self) {
                                          auto& s = resource_as<statistics_adaptor>(self);
                                          return to_statistics(s.get_bytes_counter(),
                                                               s.get_allocations_counter());
                                        }),
      nb::for_getter(nb::sig("def allocation_counts(self, /) -> nbrmm.statistics.Statistics")),
      R"doc(The counters of the current frame, as an ``nbrmm.statistics.Statistics``.)doc")
    .def(
      "push_counters",
      method<StatisticsResourceAdaptor>("push_counters", [](StatisticsResourceAdaptor& self) {
        auto [bytes, count] = resource_as<statistics_adaptor>(self).push_counters();
        return to_statistics(bytes, count);
      }),
      nb::sig("def push_counters(self) -> nbrmm.statistics.Statistics"),
      R"doc(Start a new frame of counters, all zero.

Returns
-------
Statistics
    The counters of the frame that was current before the push.)doc")
    .def(
      "pop_counters",
      method<StatisticsResourceAdaptor>("pop_counters", [](StatisticsResourceAdaptor& self) {
        auto [bytes, count] = resource_as<statistics_adaptor>(self).pop_counters();
        return to_statistics(bytes, count);
      }),
      nb::sig("def pop_counters(self) -> nbrmm.statistics.Statistics"),
      R"doc(End the current frame; its counts are added to the frame below.

Returns
-------
Statistics
    The counters of the frame that was popped.

Raises
------
IndexError
    If no frame was pushed.)doc");

  register_adaptor_wrapper<StatisticsResourceAdaptor, statistics_adaptor>();
}

}  // namespace nbrmm
