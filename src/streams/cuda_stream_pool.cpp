// nbrmm.CudaStreamPool (rmm/cuda_stream_pool.hpp): a fixed set of streams handed out
// round-robin. Streams taken from the pool keep the pool alive.
#include "bindings.hpp"
#include "core/args.hpp"
#include "core/device.hpp"
#include "core/gil.hpp"
#include "core/rmm_compat.hpp"
#include "streams/stream.hpp"

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
    Creation flags of the streams (None: ``SYNC_DEFAULT``).)doc")
    .def(
      "__init__",
      [](CudaStreamPool* self, nb::handle pool_size_arg, nb::handle flags_arg) {
        init_guard const guard{self};
        auto const pool_size = static_cast<std::size_t>(uint_arg(pool_size_arg, "pool_size"));
        auto const flags     = stream_flags_arg(flags_arg, "flags");
        if (pool_size == 0) { throw_invalid_argument("pool_size: must be positive"); }
        std::unique_ptr<rmm::cuda_stream_pool> pool;
        try {
          gil_release release;
          pool = std::make_unique<rmm::cuda_stream_pool>(pool_size, flags);
        } catch (rmm::cuda_error const&) {
          require_gpu("CudaStreamPool()");  // says so when there is no GPU
          throw;
        }
        new (self) CudaStreamPool{std::move(pool)};
      },
      nb::arg("pool_size") = rmm::cuda_stream_pool::default_size,
      nb::arg("flags").none() = rmm::cuda_stream::flags::sync_default,
      nb::sig("def __init__(self, pool_size: int = 16, "
              "flags: CudaStreamFlags | None = ...) -> None"))
    .def(
      "get_stream",
      [](nb::handle_t<CudaStreamPool> self, nb::handle stream_id) {
        auto& pool = *initialized<CudaStreamPool>(self, "get_stream").pool;
        if (stream_id.is_none()) { return pool_stream(self, pool.get_stream()); }
        // librmm wraps the id around the pool size: any non-negative id is valid.
        return pool_stream(self, pool.get_stream(uint_arg(stream_id, "stream_id")));
      },
      nb::arg("stream_id").none() = nb::none(),
      nb::sig("def get_stream(self, stream_id: int | None = None) -> Stream"),
      "The next stream of the pool, or the stream ``stream_id`` modulo the pool size. The "
      "returned Stream keeps the pool alive.")
    .def(
      "get_pool_size",
      method<CudaStreamPool>("get_pool_size",
                             [](CudaStreamPool& self) { return self.pool->get_pool_size(); }),
      "Number of streams in the pool.");
}

}  // namespace nbrmm
