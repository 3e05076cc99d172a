// nbrmm.CudaStreamPool (rmm/cuda_stream_pool.hpp): a fixed set of streams handed out
// round-robin. Streams taken from the pool keep the pool alive.
#include "bindings.hpp"
#include "gil.hpp"
#include "stream.hpp"

#include <rmm/cuda_stream_pool.hpp>

#include <memory>
#include <string>

namespace nbrmm {
namespace {

struct CudaStreamPool {
  std::unique_ptr<rmm::cuda_stream_pool> pool;
};

nb::object pool_stream(nb::handle py_pool, cuda::stream_ref ref)
{
  Stream s;
  s.handle = ref.get();
  s.owner  = nb::borrow(py_pool);
  return nb::cast(std::move(s));
}

}  // namespace

void bind_cuda_stream_pool(nb::module_& m)
{
  nb::class_<CudaStreamPool>(m, "CudaStreamPool", nb::is_weak_referenceable(), R"doc(
A pool of CUDA streams handed out round-robin.

Parameters
----------
pool_size : int, optional
    Number of streams (16 by default; must be positive).
flags : CudaStreamFlags, optional
    Creation flags of the streams.)doc")
    .def(
      "__init__",
      [](CudaStreamPool* self, std::size_t pool_size, rmm::cuda_stream::flags flags) {
        if (pool_size == 0) { throw nb::value_error("pool_size: must be positive"); }
        std::unique_ptr<rmm::cuda_stream_pool> pool;
        {
          gil_release release;
          pool = std::make_unique<rmm::cuda_stream_pool>(pool_size, flags);
        }
        new (self) CudaStreamPool{std::move(pool)};
      },
      nb::arg("pool_size") = rmm::cuda_stream_pool::default_size,
      nb::arg("flags")     = rmm::cuda_stream::flags::sync_default)
    .def(
      "get_stream",
      [](nb::handle self, std::optional<std::size_t> stream_id) {
        auto& pool = *nb::inst_ptr<CudaStreamPool>(self)->pool;
        if (!stream_id.has_value()) { return pool_stream(self, pool.get_stream()); }
        if (*stream_id >= pool.get_pool_size()) {
          throw nb::value_error(("stream_id: " + std::to_string(*stream_id) +
                                 " is out of range for a pool of " +
                                 std::to_string(pool.get_pool_size()) + " streams")
                                  .c_str());
        }
        return pool_stream(self, pool.get_stream(*stream_id));
      },
      nb::arg("stream_id") = nb::none(),
      "The next stream of the pool, or the stream with index ``stream_id``. The returned "
      "Stream keeps the pool alive.")
    .def(
      "get_pool_size", [](CudaStreamPool& self) { return self.pool->get_pool_size(); },
      "Number of streams in the pool.");
}

}  // namespace nbrmm
