// Bases for the resources nbrmm writes by hand (as opposed to librmm's): what librmm's
// resource concept asks of every resource, written once.
//
//  * resource_base<D>: D defines the stream-ordered allocate/deallocate and operator==;
//    the base adds the synchronous calls (on the legacy default stream) and the
//    device_accessible property.
//  * forwarding_resource<D>: D serves every call from `D::target()` (a reference to
//    another resource)
//    and only adds what it keeps beside it (a Python object, what the target refers to)
//    and its operator==.
#pragma once

#include "core/common.hpp"

namespace nbrmm {

template <class Derived>
class resource_base {
 public:
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return self().allocate(cuda::stream_ref{cudaStream_t{nullptr}}, bytes, alignment);
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    self().deallocate(cuda::stream_ref{cudaStream_t{nullptr}}, ptr, bytes, alignment);
  }
  friend void get_property(Derived const&, cuda::mr::device_accessible) noexcept {}

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

template <class Derived>
class forwarding_resource {
 public:
  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment)
  {
    return self().target().allocate(stream, bytes, alignment);
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept
  {
    self().target().deallocate(stream, ptr, bytes, alignment);
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return self().target().allocate_sync(bytes, alignment);
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    self().target().deallocate_sync(ptr, bytes, alignment);
  }
  friend void get_property(Derived const&, cuda::mr::device_accessible) noexcept {}

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

}  // namespace nbrmm
