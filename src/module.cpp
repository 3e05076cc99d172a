// The nbrmm extension module: an ordered list of the bindings of each librmm header.
#include "bindings.hpp"

// The extension's state is process-wide (librmm's per-device map, nanobind's registry of
// types), so it is initialised once, in the main interpreter. nanobind's own
// initialisation would already replace that state in a second interpreter, so the check
// comes first: NB_MODULE's entry point is renamed, and the one
// Python calls checks the interpreter and then calls it.
#define PyInit__nbrmm nbrmm_init_module_unchecked
NB_MODULE(_nbrmm, m)
{
  // Initialised once per process: binding the types again would abort in nanobind (a
  // second import of the extension after sys.modules was restored, say).
  static bool initialised = false;
  if (initialised) {
    throw nb::import_error(
      "nbrmm's extension is already initialised in this process and cannot be initialised "
      "again (was nbrmm removed from sys.modules and imported anew?)");
  }
  initialised = true;
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
  nbrmm::bind_lent_memory(m);
  nbrmm::bind_torch_allocator(m);
  nbrmm::bind_logger(m);
  nbrmm::bind_history(m);
  nbrmm::add_call_errors(m);  // after every binding: it adds to each public one
}

#undef PyInit__nbrmm
extern "C" NB_EXPORT PyObject* PyInit__nbrmm(void);
extern "C" PyObject* PyInit__nbrmm(void)
{
  if (PyInterpreterState_GetID(PyInterpreterState_Get()) != 0) {  // 0: the main interpreter
    PyErr_SetString(PyExc_ImportError,
                    "nbrmm can only be imported in the main interpreter, not in a subinterpreter");
    return nullptr;
  }
  return nbrmm_init_module_unchecked();
}
