// nbrmm.Buffer and the rmm-compatible nbrmm.DeviceBuffer (rmm/device_buffer.hpp).
//
// A Buffer owns its memory and co-owns the C++ copy of its resource that the resource
// object keeps for its Buffers (memory handed over by C++ stays an rmm::device_buffer
// with its own copy), and keeps the Python resource object (`mr`) and stream object
// alive. Every call that allocates passes its resource to C++ explicitly; `mr=None`
// means the current device resource, read from librmm's per-device map at call time.
#include "nb_rmm.hpp"

#include <nanobind/ndarray.h>

#include <rmm/cuda_device.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/prefetch.hpp>

#include <cstring>
#include <optional>
#include <string>

#if !defined(Py_tp_vectorcall)
#define Py_tp_vectorcall 82  // CPython 3.14's slot id; nanobind accepts it on every version
#endif

namespace nbrmm {
namespace {

/// The memory of a Buffer: allocated directly from the buffer's resource (the fast path:
/// no rmm::device_buffer bookkeeping), or an rmm::device_buffer handed over by C++.
/// Callers release the GIL around every member that allocates, copies or frees.
class memory {
 public:
  memory(std::size_t n,
         std::size_t alignment,
         cuda::stream_ref stream,
         std::shared_ptr<device_resource> const& res,
         int device,
         bool caches)
    : res_{res}, stream_{stream}, alignment_{alignment}, device_{device}, caches_{caches}
  {
    if (n != 0) { ptr_ = res_->allocate(stream_, n, alignment_); }
    size_ = capacity_ = n;
  }
  explicit memory(rmm::device_buffer&& adopted)
    : adopted_{std::make_unique<rmm::device_buffer>(std::move(adopted))}
  {
  }
  memory(memory const&)            = delete;
  memory& operator=(memory const&) = delete;
  ~memory() { free(); }

  /// Whether destroying this object frees nothing (and so cannot enter CUDA).
  [[nodiscard]] bool holds_nothing() const noexcept { return !adopted_ && ptr_ == nullptr; }
  [[nodiscard]] void* data() const noexcept { return adopted_ ? adopted_->data() : ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return adopted_ ? adopted_->size() : size_; }
  [[nodiscard]] std::size_t capacity() const noexcept
  {
    return adopted_ ? adopted_->capacity() : capacity_;
  }
  [[nodiscard]] std::size_t alignment() const noexcept
  {
    return adopted_ ? adopted_->alignment() : alignment_;
  }
  [[nodiscard]] cuda::stream_ref stream() const noexcept
  {
    return adopted_ ? adopted_->stream() : stream_;
  }
  /// Hands the free over to the deferred-free queue when it may wait (a block of a
  /// caching resource on the default stream; see deferred_frees). Call with the GIL
  /// held; afterwards this object holds nothing. Returns false when it must be freed now.
  bool defer_free() noexcept
  {
    if (!caches_ || adopted_ || ptr_ == nullptr ||
        !deferred_frees::defer(res_, ptr_, capacity_, alignment_, stream_.get(), device_)) {
      return false;
    }
    ptr_ = nullptr;
    return true;
  }
  /// The Python callables behind the resource that frees this memory, if any.
  [[nodiscard]] python_resource::state const* callables() const noexcept
  {
    return adopted_ ? nbrmm::python_state(adopted_->memory_resource())
                    : nbrmm::python_state(res_.get());
  }

  void reserve(std::size_t n, cuda::stream_ref s)
  {
    if (adopted_) { return adopted_->reserve(n, s); }
    if (n > capacity_) { reallocate(n, s); }
    stream_ = s;
  }
  void resize(std::size_t n, cuda::stream_ref s)
  {
    if (adopted_) { return adopted_->resize(n, s); }
    if (n > capacity_) { reallocate(n, s); }
    size_   = n;
    stream_ = s;
  }
  void shrink_to_fit(cuda::stream_ref s)
  {
    if (adopted_) { return adopted_->shrink_to_fit(s); }
    if (capacity_ > size_) { reallocate(size_, s); }
    stream_ = s;
  }

 private:
  /// Moves the contents into a new allocation of `n` bytes, ordered on `s`.
  void reallocate(std::size_t n, cuda::stream_ref s)
  {
    void* fresh = n != 0 ? res_->allocate(s, n, alignment_) : nullptr;
    std::size_t const keep = std::min(size_, n);
    if (keep != 0) {
      auto const status = cudaMemcpyAsync(fresh, ptr_, keep, cudaMemcpyDefault, s.get());
      if (status != cudaSuccess) {
        res_->deallocate(s, fresh, n, alignment_);
        throw_cuda_error(status, "cudaMemcpyAsync");
      }
    }
    if (ptr_ != nullptr) { res_->deallocate(s, ptr_, capacity_, alignment_); }
    ptr_      = fresh;
    capacity_ = n;
  }

  void free() noexcept
  {
    if (adopted_) {
      adopted_.reset();
      return;
    }
    if (ptr_ == nullptr) { return; }
    deallocate_on_device(res_.get(), stream_, ptr_, capacity_, alignment_, device_);
    ptr_ = nullptr;
  }

  held_resource res_;  ///< a share of the resource object's copy
  void* ptr_{nullptr};
  std::size_t size_{0};
  std::size_t capacity_{0};
  cuda::stream_ref stream_{cudaStream_t{nullptr}};
  std::size_t alignment_{default_alignment};
  int device_{-1};
  bool caches_{false};  ///< the resource is a caching one (deferred_frees::caches)
  std::unique_ptr<rmm::device_buffer> adopted_;
};

struct Buffer : resource_holder {
  std::optional<memory> buf;              ///< empty once closed
  nb::object mr;                          ///< the resource object that frees the memory
  nb::object stream;                      ///< the stream the buffer is ordered on
  int device{-1};                         ///< the device the memory lives on
  DeviceMemoryResource* counted_in{nullptr};  ///< `mr` when listed as a holder of its callables

  Buffer() noexcept
    : resource_holder{[](resource_holder* self) noexcept { static_cast<Buffer*>(self)->release(); }}
  {
  }
  Buffer(Buffer&&)            = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() { release(/*may_defer=*/true); }

  memory& get()
  {
    if (!buf.has_value()) { throw nb::value_error("the buffer is closed"); }
    return *buf;
  }

  /// Records this buffer as a holder of `mr`'s Python callables when its C++ resource
  /// uses them (see DeviceMemoryResource::holders). `shares` says that the memory was
  /// allocated from `mr`'s shared copy (so it uses them if `mr` has any).
  void count_holder(bool shares) noexcept
  {
    auto* r = nb::inst_ptr<DeviceMemoryResource>(mr);
    auto const* state = r->callables();
    if (state != nullptr && (shares || buf->callables() == state)) {
      r->holders.add(this);
      counted_in = r;
    }
  }

  /// Frees the memory (ordered on the buffer's stream) without holding the GIL. When
  /// `may_defer` (the buffer is being destroyed, not closed), a small block of a caching
  /// resource joins the deferred-free queue instead (see deferred_frees).
  void release(bool may_defer = false) noexcept
  {
    if (!buf.has_value()) { return; }
    bool const gil = holds_gil();
    if (may_defer && gil) { buf->defer_free(); }
    // An empty allocation frees nothing; its share of the resource is not the last (`mr`
    // holds one until it is cleared).
    bool const frees_nothing = buf->holds_nothing() && mr.is_valid() &&
                               nb::inst_ptr<DeviceMemoryResource>(mr)->res.has_value();
    if (!frees_nothing && gil) {
      gil_release release;
      buf.reset();
    } else {
      buf.reset();
    }
    if (counted_in != nullptr) {
      counted_in->holders.remove(this);
      counted_in = nullptr;
    }
  }
};

struct DeviceBuffer : Buffer {};

PyTypeObject* buffer_type = nullptr;

Buffer& buffer_of(nb::handle obj) { return *nb::inst_ptr<Buffer>(obj); }

/// cudaMemcpyAsync on `s`, synchronizing when `s` is the default stream (as rmm does).
void copy_bytes(void* dst, void const* src, std::size_t n, cuda::stream_ref s)
{
  if (n == 0) { return; }
  gil_release release;
  auto status = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s.get());
  if (status != cudaSuccess) { throw_cuda_error(status, "cudaMemcpyAsync"); }
  if (is_legacy_default(s.get())) {
    status = cudaStreamSynchronize(s.get());
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
  }
}

/// A contiguous Python buffer (host memory), released on scope exit.
class host_view {
 public:
  host_view(nb::handle obj, bool writable, char const* param)
  {
    int const flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      nb::python_error err;
      err.restore();
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      nb::object msg = nb::steal(PyObject_Str(value != nullptr ? value : Py_None));
      bool const wrong_type = PyErr_GivenExceptionMatches(type, PyExc_TypeError) != 0;
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
      std::string text = std::string{param} + ": expected a C-contiguous" +
                         (writable ? " writable" : "") + " buffer (bytes-like or NumPy array): " +
                         nb::str(msg).c_str();
      if (wrong_type) { throw nb::type_error(text.c_str()); }
      throw nb::value_error(text.c_str());
    }
  }
  host_view(host_view const&)            = delete;
  host_view& operator=(host_view const&) = delete;
  ~host_view() { PyBuffer_Release(&view_); }
  [[nodiscard]] void* data() const noexcept { return view_.buf; }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

/// Pointer and size of a contiguous device array given by __cuda_array_interface__.
std::pair<void const*, std::size_t> device_array(nb::handle obj, char const* param)
{
  if (PyType_IsSubtype(Py_TYPE(obj.ptr()), buffer_type)) {
    auto& b = buffer_of(obj).get();
    return {b.data(), b.size()};
  }
  if (!nb::hasattr(obj, "__cuda_array_interface__")) {
    throw nb::type_error((std::string{param} +
                          ": expected an object with __cuda_array_interface__, got " +
                          nb::type_name(obj.type()).c_str())
                           .c_str());
  }
  nb::dict cai = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
  nb::tuple shape = nb::cast<nb::tuple>(cai["shape"]);
  std::string typestr = nb::cast<std::string>(cai["typestr"]);
  std::size_t itemsize = 0;
  try {
    itemsize = std::stoul(typestr.substr(2));
  } catch (std::exception const&) {
    throw nb::value_error((std::string{param} + ": bad typestr '" + typestr + "'").c_str());
  }
  std::size_t count = 1;
  for (nb::handle dim : shape) { count *= nb::cast<std::size_t>(dim); }
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    nb::tuple strides = nb::cast<nb::tuple>(cai["strides"]);
    std::size_t expected = itemsize;
    for (std::size_t i = nb::len(shape); i-- > 0;) {
      auto const extent = nb::cast<std::size_t>(shape[i]);
      if (extent > 1 && nb::cast<std::size_t>(strides[i]) != expected) {
        throw nb::value_error((std::string{param} + ": the device array is not C-contiguous").c_str());
      }
      expected *= extent;
    }
  }
  nb::tuple data = nb::cast<nb::tuple>(cai["data"]);
  auto const ptr = nb::cast<std::uintptr_t>(data[0]);
  if (cai.contains("stream") && !cai["stream"].is_none()) {
    // The producer asks consumers to order on its stream: wait for it.
    auto const producer = reinterpret_cast<cudaStream_t>(nb::cast<std::uintptr_t>(cai["stream"]));
    gil_release release;
    auto const status = cudaStreamSynchronize(producer);
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
  }
  return {reinterpret_cast<void const*>(ptr), count * itemsize};
}

/// Constructs `self` (raw storage) as a buffer of `n` bytes from the resource object `mr`
/// on the stream object `stream`. On failure nothing was constructed.
void construct(Buffer* self, std::size_t n, std::size_t alignment, nb::object mr, nb::object stream)
{
  auto* r              = nb::inst_ptr<DeviceMemoryResource>(mr);
  std::shared_ptr<device_resource> const& res = r->shared();
  cuda::stream_ref s   = nb::inst_ptr<Stream>(stream)->ref();
  new (self) Buffer{};
  try {
    std::optional<gil_release> release;
    if (n != 0) { release.emplace(); }  // an empty buffer allocates nothing: no CUDA call
    self->buf.emplace(n, alignment, s, res, r->device, r->caches());
  } catch (...) {
    self->~Buffer();
    throw;
  }
  self->device = r->device >= 0 ? r->device : current_device();
  self->mr     = std::move(mr);
  self->stream = std::move(stream);
  self->count_holder(true);
}

/// A new, ready instance of `cls` whose storage `init` constructs.
template <class Init>
nb::object new_buffer(nb::handle cls, Init&& init)
{
  nb::object obj = nb::inst_alloc(cls);
  init(nb::inst_ptr<Buffer>(obj));
  nb::inst_mark_ready(obj);
  return obj;
}

/// Allocates `n` bytes from `mr` (None: the current resource) and, when `src` is
/// given, copies `n` bytes from it. Used by every copy and host upload.
nb::object allocate_buffer(nb::handle cls,
                           std::size_t n,
                           void const* src,
                           nb::handle mr_arg,
                           nb::handle stream_arg_obj,
                           std::size_t alignment = default_alignment)
{
  nb::object mr     = resource_or_current(mr_arg, "mr");
  nb::object stream = stream_object(stream_arg_obj, "stream");
  cuda::stream_ref s = nb::inst_ptr<Stream>(stream)->ref();
  nb::object out    = new_buffer(cls, [&](Buffer* self) {
    construct(self, n, alignment, std::move(mr), std::move(stream));
  });
  if (src != nullptr) { copy_bytes(buffer_of(out).buf->data(), src, n, s); }
  return out;
}

/// A new buffer of the same class and contents, from `mr` and on `stream` (None: the
/// buffer's own resource and stream, as rmm's copy() does).
nb::object copy_of(nb::handle py_self, nb::handle mr, nb::handle stream)
{
  Buffer& self = buffer_of(py_self);
  auto& b      = self.get();
  return allocate_buffer(py_self.type(), b.size(), b.data(), mr.is_none() ? self.mr : mr,
                         stream.is_none() ? self.stream : stream, b.alignment());
}

std::uintptr_t ptr_of(Buffer& self)
{
  return reinterpret_cast<std::uintptr_t>(self.get().data());
}

nb::object numpy_empty(std::size_t n)
{
  // numpy is a dependency of nbrmm (as of rmm): copy_to_host() always returns an ndarray.
  return nb::module_::import_("numpy").attr("empty")(n, "u1");
}

nb::object copy_to_host(Buffer& self, nb::handle ary, nb::handle stream)
{
  auto& b            = self.get();
  cuda::stream_ref s = stream_arg(stream, "stream");
  nb::object out     = ary.is_none() ? numpy_empty(b.size()) : nb::borrow(ary);
  host_view view{out, true, "ary"};
  if (view.size() < b.size()) {
    throw nb::value_error(("ary: too small (" + std::to_string(view.size()) + " bytes) for " +
                           std::to_string(b.size()) + " bytes")
                            .c_str());
  }
  copy_bytes(view.data(), b.data(), b.size(), s);
  return out;
}

void copy_from_host(Buffer& self, nb::handle ary, nb::handle stream)
{
  auto& b            = self.get();
  cuda::stream_ref s = stream_arg(stream, "stream");
  host_view view{ary, false, "ary"};
  if (view.size() > b.size()) {
    throw nb::value_error(("ary: " + std::to_string(view.size()) +
                           " bytes do not fit in a buffer of " + std::to_string(b.size()) +
                           " bytes")
                            .c_str());
  }
  copy_bytes(b.data(), view.data(), view.size(), s);
}

void copy_from_device(Buffer& self, nb::handle cuda_ary, nb::handle stream)
{
  auto& b            = self.get();
  cuda::stream_ref s = stream_arg(stream, "stream");
  auto [src, n]      = device_array(cuda_ary, "cuda_ary");
  if (n > b.size()) {
    throw nb::value_error(("cuda_ary: " + std::to_string(n) + " bytes do not fit in a buffer of " +
                           std::to_string(b.size()) + " bytes")
                            .c_str());
  }
  copy_bytes(b.data(), src, n, s);
}

nb::bytes to_bytes(Buffer& self, nb::handle stream)
{
  auto& b            = self.get();
  cuda::stream_ref s = stream_arg(stream, "stream");
  nb::object out     = nb::steal(PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(b.size())));
  if (!out.is_valid()) { throw nb::python_error(); }
  copy_bytes(PyBytes_AS_STRING(out.ptr()), b.data(), b.size(), s);
  if (!is_legacy_default(s.get())) {
    gil_release release;
    auto const status = cudaStreamSynchronize(s.get());
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
  }
  return nb::steal<nb::bytes>(out.release());
}

nb::object to_device(nb::handle cls, nb::handle b, nb::handle stream, nb::handle mr)
{
  host_view view{b, false, "b"};
  return allocate_buffer(cls, view.size(), view.data(), mr, stream);
}

/// Runs `fn(buffer, stream)` with the buffer's device current, then records `stream`.
template <class Fn>
void on_buffer_stream(Buffer& self, nb::handle stream, Fn&& fn)
{
  auto& b            = self.get();
  nb::object s_obj   = stream_object(stream, "stream");
  cuda::stream_ref s = nb::inst_ptr<Stream>(s_obj)->ref();
  {
    gil_release release;
    device_scope const on_device{self.device};
    fn(b, s);
  }
  self.stream = std::move(s_obj);
}

nb::dict cuda_array_interface(Buffer& self)
{
  auto& b = self.get();
  nb::dict cai;
  cai["data"]    = nb::make_tuple(reinterpret_cast<std::uintptr_t>(b.data()), false);
  cai["shape"]   = nb::make_tuple(b.size());
  cai["strides"] = nb::none();
  cai["typestr"] = "|u1";
  cai["version"] = 3;
  auto const handle = nb::inst_ptr<Stream>(self.stream)->handle;
  // 0 is not a valid CAI stream value: the default stream is spelled 1 (legacy).
  cai["stream"] = handle == nullptr ? std::uintptr_t{1} : reinterpret_cast<std::uintptr_t>(handle);
  return cai;
}

/// Makes `consumer` wait for the work queued so far on the buffer's stream.
void order_for_consumer(Buffer& self, nb::handle consumer)
{
  if (consumer.is_none()) { return; }
  auto const value = nb::cast<long long>(consumer);
  if (value == -1) { return; }  // the consumer asks for no synchronization
  cudaStream_t const target =
    value == 0 ? nullptr : reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(value));
  cudaStream_t const producer = nb::inst_ptr<Stream>(self.stream)->handle;
  if (target == producer) { return; }
  gil_release release;
  cudaEvent_t event{};
  auto status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (status != cudaSuccess) { throw_cuda_error(status, "cudaEventCreateWithFlags"); }
  status = cudaEventRecord(event, producer);
  if (status == cudaSuccess) { status = cudaStreamWaitEvent(target, event, 0); }
  cudaEventDestroy(event);
  if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamWaitEvent"); }
}

/// DLPack device of the buffer's memory, asked of the driver: CUDA, CUDA host (pinned) or
/// CUDA managed. Without a driver the resource's host accessibility decides.
std::pair<int, int> dlpack_device(Buffer& self)
{
  auto& b          = self.get();
  int const device = self.device < 0 ? 0 : self.device;
  if (b.data() != nullptr) {
    cudaPointerAttributes attrs{};
    if (cudaPointerGetAttributes(&attrs, b.data()) == cudaSuccess) {
      switch (attrs.type) {
        case cudaMemoryTypeHost: return {static_cast<int>(nb::device::cuda_host::value), 0};
        case cudaMemoryTypeManaged:
          return {static_cast<int>(nb::device::cuda_managed::value), device};
        default: break;
      }
    } else {
      cudaGetLastError();
    }
  }
  auto const* r = nb::inst_ptr<DeviceMemoryResource>(self.mr);
  if (r->host_accessible) { return {static_cast<int>(nb::device::cuda_managed::value), device}; }
  return {static_cast<int>(nb::device::cuda::value), device};
}

nb::object dlpack(nb::handle py_self, nb::handle stream, nb::kwargs kwargs)
{
  Buffer& self = buffer_of(py_self);
  auto& b      = self.get();
  order_for_consumer(self, stream);
  auto const [type, id] = dlpack_device(self);
  size_t shape[1]       = {b.size()};
  nb::ndarray<nb::array_api> view(b.data(), 1, shape, py_self, nullptr,
                                 nb::dtype<std::uint8_t>(), type, id);
  nb::object arr = nb::cast(view, nb::rv_policy::reference);
  return arr.attr("__dlpack__")(**kwargs);
}

/// Which argument slot the keyword `name` fills (nullptr: not a parameter of Buffer).
/// Slots, in order: Buffer(nbytes=0, *, mr=None, stream=DEFAULT_STREAM, alignment=256).
PyObject** keyword_slot(PyObject* name, PyObject** slots)
{
  static PyObject* const names[] = {  // interned for good: never released
    PyUnicode_InternFromString("nbytes"), PyUnicode_InternFromString("mr"),
    PyUnicode_InternFromString("stream"), PyUnicode_InternFromString("alignment")};
  for (int i = 0; i < 4; ++i) {
    if (name == names[i]) { return &slots[i]; }
  }
  for (int i = 0; i < 4; ++i) {
    if (PyUnicode_Compare(name, names[i]) == 0) { return &slots[i]; }
  }
  PyErr_Clear();  // a non-str keyword compares as an error
  return nullptr;
}

/// `Buffer(...)`: the type's vectorcall. Parses the arguments of `__init__` without
/// building a kwargs dict and constructs the instance in place; the same work as
/// `__init__`, which Python subclasses (and explicit `__init__` calls) still use.
PyObject* buffer_vectorcall(PyObject* type,
                            PyObject* const* args,
                            std::size_t nargsf,
                            PyObject* kwnames) noexcept
{
  Py_ssize_t const nargs = PyVectorcall_NARGS(nargsf);
  // nbytes, mr, stream, alignment
  PyObject* slots[4] = {nargs >= 1 ? args[0] : nullptr, nullptr, nullptr, nullptr};
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError,
                 "Buffer() takes at most 1 positional argument (nbytes), %zd were given", nargs);
    return nullptr;
  }
  Py_ssize_t const nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* name   = PyTuple_GET_ITEM(kwnames, i);
    PyObject** slot  = keyword_slot(name, slots);
    if (slot == nullptr) {
      PyErr_Format(PyExc_TypeError, "Buffer() got an unexpected keyword argument '%S'", name);
      return nullptr;
    }
    if (*slot != nullptr) {
      PyErr_Format(PyExc_TypeError, "Buffer() got multiple values for argument '%S'", name);
      return nullptr;
    }
    *slot = args[nargs + i];
  }
  try {
    std::size_t const n = slots[0] != nullptr ? parse_size(slots[0], "nbytes") : 0;
    std::size_t const alignment =
      slots[3] != nullptr ? nb::cast<std::size_t>(nb::handle{slots[3]}) : default_alignment;
    nb::object mr = resource_or_current(slots[1] != nullptr ? nb::handle{slots[1]} : nb::none(), "mr");
    nb::object stream = slots[2] != nullptr ? stream_object(slots[2], "stream")
                                            : nb::borrow(default_stream());
    return new_buffer(type, [&](Buffer* self) {
             construct(self, n, alignment, std::move(mr), std::move(stream));
           })
      .release()
      .ptr();
  } catch (...) {
    raise_current_exception();
    return nullptr;
  }
}

int buffer_traverse(PyObject* self, visitproc visit, void* arg)
{
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) { return 0; }
  Buffer* b = nb::inst_ptr<Buffer>(self);
  Py_VISIT(b->mr.ptr());
  Py_VISIT(b->stream.ptr());
  return 0;
}

int buffer_clear(PyObject* self)
{
  if (!nb::inst_ready(self)) { return 0; }
  Buffer* b = nb::inst_ptr<Buffer>(self);
  b->release();
  b->mr.reset();
  b->stream.reset();
  return 0;
}

int buffer_getbuffer(PyObject* self, Py_buffer* view, int flags)
{
  Buffer* b = nb::inst_ptr<Buffer>(self);
  if (!b->buf.has_value()) {
    PyErr_SetString(PyExc_ValueError, "the buffer is closed");
    return -1;
  }
  if (!nb::inst_ptr<DeviceMemoryResource>(b->mr)->host_accessible) {
    PyErr_SetString(PyExc_BufferError,
                    "the buffer's memory is not host-accessible (use copy_to_host())");
    return -1;
  }
  return PyBuffer_FillInfo(view, self, b->buf->data(), static_cast<Py_ssize_t>(b->buf->size()), 0,
                           flags);
}

/// Buffer's slots. DeviceBuffer (another signature) takes them from the second on,
/// without the vectorcall constructor: `buffer_slots + 1`.
PyType_Slot buffer_slots[] = {{Py_tp_vectorcall, reinterpret_cast<void*>(buffer_vectorcall)},
                              {Py_tp_traverse, reinterpret_cast<void*>(buffer_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(buffer_clear)},
                              {Py_bf_getbuffer, reinterpret_cast<void*>(buffer_getbuffer)},
                              {0, nullptr}};

}  // namespace

void bind_device_buffer(nb::module_& m)
{
  auto cls = nb::class_<Buffer>(m, "Buffer", nb::type_slots(buffer_slots), nb::is_weak_referenceable(), nb::pooled(), R"doc(
A block of device memory owned by Python, allocated from an nbrmm resource.

Parameters
----------
nbytes : int or str, optional
    Size in bytes (``"1MiB"`` style strings accepted). 0 by default.
mr : DeviceMemoryResource, optional
    The resource to allocate from (and free to). Default: the current device resource,
    read from librmm's per-device map at call time.
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the allocation (and later the deallocation) is ordered on.
alignment : int, optional
    Required alignment (a power of two), 256 by default.

Notes
-----
The buffer keeps ``mr`` and ``stream`` alive; its C++ part also owns a copy of the
resource. Copies on the default stream synchronize; on any other stream they are
asynchronous (synchronize the stream before reading the destination).)doc");
  buffer_type = reinterpret_cast<PyTypeObject*>(cls.ptr());

  cls.def(
       "__init__",
       [](Buffer* self, nb::handle nbytes, nb::handle mr, nb::handle stream, std::size_t alignment) {
         std::size_t const n = parse_size(nbytes, "nbytes");
         construct(self, n, alignment, resource_or_current(mr, "mr"),
                   stream_object(stream, "stream"));
       },
       nb::arg("nbytes") = 0, nb::kw_only(), nb::arg("mr") = nb::none(),
       nb::arg("stream") = default_stream(), nb::arg("alignment") = default_alignment)
    .def_prop_ro("ptr", &ptr_of, "The device pointer as an int.")
    .def_prop_ro(
      "size", [](Buffer& self) { return self.get().size(); }, "Size in bytes.")
    .def_prop_ro(
      "nbytes", [](Buffer& self) { return self.get().size(); }, "Size in bytes.")
    .def("__len__", [](Buffer& self) { return self.get().size(); })
    .def("__sizeof__", [](Buffer& self) { return self.buf.has_value() ? self.buf->size() : 0; })
    .def(
      "capacity", [](Buffer& self) { return self.get().capacity(); },
      "Allocated capacity in bytes (at least ``size``).")
    .def_prop_ro(
      "mr", [](Buffer& self) { return self.mr; },
      "The resource object that allocated the memory and will free it.")
    .def_prop_ro(
      "stream", [](Buffer& self) { return self.stream; },
      "The stream the buffer's memory is ordered on.")
    .def_prop_ro(
      "device", [](Buffer& self) { return self.device; }, "The device the memory lives on.")
    .def_prop_ro(
      "alignment", [](Buffer& self) { return self.get().alignment(); },
      "The alignment the memory was allocated with.")
    .def_prop_ro(
      "closed", [](Buffer& self) { return !self.buf.has_value(); },
      "Whether :meth:`close` has freed the memory.")
    .def(
      "reserve",
      [](Buffer& self, nb::handle new_capacity, nb::handle stream) {
        std::size_t const n = parse_size(new_capacity, "new_capacity");
        on_buffer_stream(self, stream, [n](auto& b, auto s) { b.reserve(n, s); });
      },
      nb::arg("new_capacity"), nb::arg("stream") = default_stream(),
      "Grow the capacity to at least ``new_capacity`` bytes, keeping the contents.")
    .def(
      "resize",
      [](Buffer& self, nb::handle new_size, nb::handle stream) {
        std::size_t const n = parse_size(new_size, "new_size");
        on_buffer_stream(self, stream, [n](auto& b, auto s) { b.resize(n, s); });
      },
      nb::arg("new_size"), nb::arg("stream") = default_stream(),
      "Resize to ``new_size`` bytes on the buffer's own resource, keeping the prefix.")
    .def(
      "shrink_to_fit",
      [](Buffer& self, nb::handle stream) {
        on_buffer_stream(self, stream, [](auto& b, auto s) { b.shrink_to_fit(s); });
      },
      nb::arg("stream") = default_stream(), "Release unused capacity.")
    .def(
      "copy",
      [](nb::handle py_self, nb::handle mr, nb::handle stream) {
        return copy_of(py_self, mr, stream);
      },
      nb::arg("mr") = nb::none(), nb::arg("stream") = nb::none(),
      R"doc(A new buffer with the same contents.

Parameters
----------
mr : DeviceMemoryResource, optional
    Where to allocate the copy; the buffer's own resource by default (as rmm does).
stream : Stream, optional
    The stream of the copy; the buffer's own stream by default.)doc")
    .def("__copy__", [](nb::handle py_self) { return copy_of(py_self, nb::none(), nb::none()); })
    .def(
      "__deepcopy__",
      [](nb::handle py_self, nb::handle) { return copy_of(py_self, nb::none(), nb::none()); },
      nb::arg("memo"))
    .def("copy_to_host", &copy_to_host, nb::arg("ary") = nb::none(),
         nb::arg("stream") = default_stream(),
         R"doc(Copy the contents to host memory.

Parameters
----------
ary : writable C-contiguous buffer, optional
    Destination of at least ``size`` bytes; a new ``numpy.uint8`` array when omitted.
stream : Stream, optional
    Asynchronous unless it is the default stream.

Returns
-------
numpy.ndarray or the type of ``ary``
    ``ary`` when given, otherwise a new one-dimensional ``numpy.uint8`` array of ``size``
    elements.)doc")
    .def("copy_from_host", &copy_from_host, nb::arg("ary"), nb::arg("stream") = default_stream(),
         "Copy a C-contiguous host buffer of at most ``size`` bytes into the buffer.")
    .def("copy_from_device", &copy_from_device, nb::arg("cuda_ary"),
         nb::arg("stream") = default_stream(),
         "Copy a C-contiguous device array (``__cuda_array_interface__``) of at most ``size`` "
         "bytes into the buffer.")
    .def("tobytes", &to_bytes, nb::arg("stream") = default_stream(),
         "The contents as ``bytes`` (always synchronizes).")
    .def("__bytes__", [](Buffer& self) { return to_bytes(self, default_stream()); })
    .def_static(
      "to_device",
      [](nb::handle b, nb::handle stream, nb::handle mr) {
        return to_device(nb::handle{reinterpret_cast<PyObject*>(buffer_type)}, b, stream, mr);
      },
      nb::arg("b"), nb::arg("stream") = default_stream(), nb::arg("mr") = nb::none(),
      "A new buffer holding a copy of the host buffer ``b`` (allocated from ``mr``, default: "
      "the current device resource).")
    .def(
      "prefetch",
      [](Buffer& self, std::optional<int> device, nb::handle stream) {
        auto& b            = self.get();
        cuda::stream_ref s = stream.is_none() ? nb::inst_ptr<Stream>(self.stream)->ref()
                                              : stream_arg(stream, "stream");
        int const target   = device.value_or(self.device);
        if (b.size() == 0) { return; }
        gil_release release;
        rmm::prefetch(b.data(), b.size(), rmm::cuda_device_id{target}, s);
      },
      nb::arg("device") = nb::none(), nb::arg("stream") = nb::none(),
      "Prefetch managed memory to ``device`` (``cudaCpuDeviceId`` = -1 for the host); a "
      "no-op for memory that is not managed.")
    .def(
      "close", [](Buffer& self) { self.release(); },
      "Free the memory now; any later use of the buffer raises ValueError.")
    .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
    .def(
      "__exit__",
      [](Buffer& self, nb::handle, nb::handle, nb::handle) { self.release(); },
      nb::arg("exc_type").none(), nb::arg("exc_value").none(), nb::arg("traceback").none())
    .def_prop_ro("__cuda_array_interface__", &cuda_array_interface,
                 "CUDA array interface (version 3): a 1-D ``uint8`` array with its stream.")
    .def("__dlpack__", &dlpack, nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("kwargs"),
         "DLPack export (1-D ``uint8``); the consumer's ``stream`` is ordered after the "
         "buffer's stream. The capsule keeps the buffer alive.")
    .def(
      "__dlpack_device__", [](Buffer& self) { return dlpack_device(self); },
      "``(device_type, device_id)`` of the memory for DLPack.")
    .def("__repr__", [](nb::handle py_self) {
      Buffer& self = buffer_of(py_self);
      if (!self.buf.has_value()) { return std::string{"<nbrmm.Buffer (closed)>"}; }
      char ptr[32];
      std::snprintf(ptr, sizeof ptr, "0x%llx",
                    static_cast<unsigned long long>(ptr_of(self)));
      std::string text{"<"};
      text.append(nb::type_name(py_self.type()).c_str())
        .append(" size=")
        .append(std::to_string(self.buf->size()))
        .append(" ptr=")
        .append(ptr)
        .append(">");
      return text;
    });

  cls.def_static(
    "_from_capsule",
    [](nb::capsule capsule) {
      auto* owned =
        static_cast<rmm::device_buffer*>(PyCapsule_GetPointer(capsule.ptr(), NBRMM_BUFFER_CAPSULE));
      if (owned == nullptr) { throw nb::python_error(); }
      if (PyCapsule_GetContext(capsule.ptr()) != nullptr) {
        throw nb::value_error("this rmm::device_buffer was already handed to Python");
      }
      // The buffer owns its resource; its `mr` is the Python object for that resource.
      int const device = current_device();
      nb::object mr =
        wrap_resource(device_resource{owned->memory_resource()}, device);
      nb::object stream = stream_for_handle(owned->stream().get());
      nb::object out = new_buffer(nb::handle{reinterpret_cast<PyObject*>(buffer_type)},
                                  [&](Buffer* self) {
                                    new (self) Buffer{};
                                    self->buf.emplace(std::move(*owned));
                                    self->device = device;
                                    self->mr     = std::move(mr);
                                    self->stream = std::move(stream);
                                    self->count_holder(false);
                                  });
      PyCapsule_SetContext(capsule.ptr(), capsule.ptr());  // adopted: the capsule is empty now
      return out;
    },
    nb::arg("capsule"),
    "Adopt an ``rmm::device_buffer`` handed over by C++ (see ``<nbrmm/nbrmm.hpp>``).");

  nb::class_<DeviceBuffer, Buffer>(m, "DeviceBuffer", nb::type_slots(buffer_slots + 1),
                                   nb::is_weak_referenceable(), R"doc(
rmm-compatible device buffer: ``DeviceBuffer(*, ptr=0, size=0, stream=DEFAULT_STREAM,
mr=None)``.

Parameters
----------
ptr : int, optional
    Host or device pointer to copy ``size`` bytes from (0: leave uninitialised).
size : int, optional
    Size in bytes.
stream : Stream, optional
    The stream of the allocation and copy.
mr : DeviceMemoryResource, optional
    The resource to allocate from; the current device resource by default.)doc")
    .def(
      "__init__",
      [](DeviceBuffer* self, std::uintptr_t ptr, nb::handle size, nb::handle stream, nb::handle mr) {
        std::size_t const n = parse_size(size, "size");
        construct(self, n, default_alignment, resource_or_current(mr, "mr"),
                  stream_object(stream, "stream"));
        if (ptr != 0) {
          copy_bytes(self->buf->data(), reinterpret_cast<void const*>(ptr), n,
                     nb::inst_ptr<Stream>(self->stream)->ref());
        }
      },
      nb::kw_only(), nb::arg("ptr") = 0, nb::arg("size") = 0,
      nb::arg("stream") = default_stream(), nb::arg("mr") = nb::none())
    .def_static(
      "to_device",
      [](nb::handle b, nb::handle stream, nb::handle mr) {
        return to_device(nb::type<DeviceBuffer>(), b, stream, mr);
      },
      nb::arg("b"), nb::arg("stream") = default_stream(), nb::arg("mr") = nb::none(),
      "A new DeviceBuffer holding a copy of the host buffer ``b``.");

  m.def(
    "to_device",
    [](nb::handle b, nb::handle stream, nb::handle mr) {
      return to_device(nb::type<DeviceBuffer>(), b, stream, mr);
    },
    nb::arg("b"), nb::arg("stream") = default_stream(), nb::arg("mr") = nb::none(),
    "A new DeviceBuffer holding a copy of the host buffer ``b`` (allocated from ``mr``, "
    "default: the current device resource).");
}

}  // namespace nbrmm
