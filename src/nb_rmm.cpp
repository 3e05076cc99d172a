// The nbrmm extension module: an ordered list of the bindings of each librmm header.
#include "bindings.hpp"

NB_MODULE(_nbrmm, m)
{
  m.doc() = "nanobind bindings for librmm (RAPIDS Memory Manager)";
  nbrmm::bind_errors(m);
  nbrmm::bind_rmm_compat(m);  // exception classes rmm-compatible argument checks raise
  nbrmm::bind_cuda_device(m);
  nbrmm::bind_cuda_stream(m);
  nbrmm::bind_cuda_stream_pool(m);
  nbrmm::bind_memory_resource(m);  // base classes before every resource
  nbrmm::bind_cuda_memory_resource(m);
  nbrmm::bind_callback_memory_resource(m);
  nbrmm::bind_managed_memory_resource(m);
  nbrmm::bind_system_memory_resource(m);
  nbrmm::bind_sam_headroom_memory_resource(m);
  nbrmm::bind_pinned_host_memory_resource(m);
  nbrmm::bind_cuda_async_memory_resource(m);
  nbrmm::bind_cuda_async_view_memory_resource(m);
  nbrmm::bind_cuda_async_managed_memory_resource(m);
  nbrmm::bind_pool_memory_resource(m);
  nbrmm::bind_arena_memory_resource(m);
  nbrmm::bind_fixed_size_memory_resource(m);
  nbrmm::bind_binning_memory_resource(m);
  nbrmm::bind_limiting_resource_adaptor(m);
  nbrmm::bind_logging_resource_adaptor(m);
  nbrmm::bind_statistics_resource_adaptor(m);
  nbrmm::bind_tracking_resource_adaptor(m);
  nbrmm::bind_failure_callback_resource_adaptor(m);
  nbrmm::bind_prefetch_resource_adaptor(m);
  nbrmm::bind_aligned_resource_adaptor(m);
  nbrmm::bind_thread_safe_resource_adaptor(m);
  nbrmm::bind_per_device_resource(m);
  nbrmm::bind_device_buffer(m);
  nbrmm::bind_pointer_copies(m);
  nbrmm::bind_cupy_allocator(m);
  nbrmm::bind_torch_allocator(m);
  nbrmm::bind_cuda_core_adapter(m);
  nbrmm::bind_logger(m);
  nbrmm::bind_deferred_frees(m);  // diagnostics of the deferred-free queue
}
