// The binding entry points, in the order nb_rmm.cpp calls them: one per source file.
#pragma once

#include "core/common.hpp"

namespace nbrmm {

void bind_errors(nb::module_& m);
void bind_rmm_compat(nb::module_& m);
void bind_cuda_device(nb::module_& m);
void bind_cuda_stream(nb::module_& m);
void bind_cuda_stream_pool(nb::module_& m);
void bind_memory_resource(nb::module_& m);
void bind_cuda_memory_resource(nb::module_& m);
void bind_callback_memory_resource(nb::module_& m);
void bind_managed_memory_resource(nb::module_& m);
void bind_system_memory_resource(nb::module_& m);
void bind_sam_headroom_memory_resource(nb::module_& m);
void bind_pinned_host_memory_resource(nb::module_& m);
void bind_cuda_async_memory_resource(nb::module_& m);
void bind_cuda_async_view_memory_resource(nb::module_& m);
void bind_cuda_async_managed_memory_resource(nb::module_& m);
void bind_pool_memory_resource(nb::module_& m);
void bind_arena_memory_resource(nb::module_& m);
void bind_fixed_size_memory_resource(nb::module_& m);
void bind_binning_memory_resource(nb::module_& m);
void bind_limiting_resource_adaptor(nb::module_& m);
void bind_logging_resource_adaptor(nb::module_& m);
void bind_statistics_resource_adaptor(nb::module_& m);
void bind_tracking_resource_adaptor(nb::module_& m);
void bind_failure_callback_resource_adaptor(nb::module_& m);
void bind_prefetch_resource_adaptor(nb::module_& m);
void bind_aligned_resource_adaptor(nb::module_& m);
void bind_thread_safe_resource_adaptor(nb::module_& m);
void bind_per_device_resource(nb::module_& m);
void bind_device_buffer(nb::module_& m);
void bind_pointer_copies(nb::module_& m);
void bind_lent_memory(nb::module_& m);
void bind_torch_allocator(nb::module_& m);
void bind_logger(nb::module_& m);
void bind_history(nb::module_& m);
/// Last: the catch-all overloads that report calls no binding accepts (core/call_errors.cpp).
void add_call_errors(nb::module_& m);

}  // namespace nbrmm
