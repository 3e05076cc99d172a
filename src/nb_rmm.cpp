// The nbrmm extension module: an ordered list of the bindings of each librmm header.
#include "nb_rmm.hpp"

NB_MODULE(_nbrmm, m)
{
  m.doc() = "nanobind bindings for librmm (RAPIDS Memory Manager)";
  nbrmm::bind_errors(m);
  nbrmm::bind_cuda_device(m);
  nbrmm::bind_cuda_stream(m);
  nbrmm::bind_cuda_stream_pool(m);
  nbrmm::bind_memory_resource(m);  // base classes before every resource
  nbrmm::bind_cuda_memory_resource(m);
  nbrmm::bind_callback_memory_resource(m);
  nbrmm::bind_per_device_resource(m);
  nbrmm::bind_device_buffer(m);
  nbrmm::bind_testing(m);  // nbrmm._nbrmm._testing
}
