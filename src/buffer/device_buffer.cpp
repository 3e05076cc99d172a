// nbrmm.Buffer and the rmm-compatible nbrmm.DeviceBuffer (rmm/device_buffer.hpp).
//
// Every call that allocates passes its resource to C++ explicitly; `mr=None` means the
// current device resource, read from librmm's per-device map at call time. One parser
// (buffer_args) reads the arguments of every entry point that makes a buffer. See
// buffer.hpp for what keeps a buffer's memory valid while it is in use.
#include "core/args.hpp"
#include "bindings.hpp"
#include "buffer/buffer.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "buffer/host_copy.hpp"
#include "core/rmm_compat.hpp"
#include "streams/stream.hpp"

#include <nanobind/ndarray.h>

#include <rmm/aligned.hpp>
#include <rmm/cuda_device.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/prefetch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

namespace nbrmm {

// ------------------------------------------------------------------------------------
// buffer_memory
// ------------------------------------------------------------------------------------

buffer_memory::buffer_memory(std::size_t n,
                             std::size_t alignment,
                             cuda::stream_ref stream,
                             std::shared_ptr<device_resource> const& res,
                             int device)
  : res_{res}, stream_{stream}, alignment_{alignment}, device_{device}
{
  block_ = allocate_block(res_.get(), stream_, n, alignment_, device_);
  size_ = capacity_ = n;
}

buffer_memory::buffer_memory(rmm::device_buffer&& adopted)
  : adopted_{std::make_unique<rmm::device_buffer>(std::move(adopted))}
{
}

buffer_memory::buffer_memory(buffer_memory&& other) noexcept
  : res_{std::move(other.res_)},
    block_{std::exchange(other.block_, block{})},
    size_{std::exchange(other.size_, 0)},
    capacity_{std::exchange(other.capacity_, 0)},
    stream_{other.stream_},
    alignment_{other.alignment_},
    device_{other.device_},
    adopted_{std::move(other.adopted_)}
{
}

void buffer_memory::free_later(nb::handle owner) noexcept
{
  if (adopted_) {
    held_resource none;
    waiting_frees::add(none, block{}, adopted_->stream().get(), device_, owner,
                       std::move(adopted_));
    return;
  }
  if (block_.raw == nullptr) { return; }
  waiting_frees::add(res_, block_, stream_.get(), device_, owner);
  block_ = block{};
}

void buffer_memory::reserve(std::size_t n, cuda::stream_ref s)
{
  if (adopted_) { return adopted_->reserve(n, s); }
  if (n > capacity_) { reallocate(n, s); }
  stream_ = s;
}

void buffer_memory::resize(std::size_t n, cuda::stream_ref s)
{
  if (adopted_) { return adopted_->resize(n, s); }
  if (n > capacity_) { reallocate(n, s); }
  size_   = n;
  stream_ = s;
}

void buffer_memory::shrink_to_fit(cuda::stream_ref s)
{
  if (adopted_) { return adopted_->shrink_to_fit(s); }
  if (capacity_ > size_) { reallocate(size_, s); }
  stream_ = s;
}

void buffer_memory::reallocate(std::size_t n, cuda::stream_ref s)
{
  block fresh            = allocate_block(res_.get(), s, n, alignment_, device_);
  std::size_t const keep = std::min(size_, n);
  if (keep != 0) {
    auto const status = cudaMemcpyAsync(fresh.data, block_.data, keep, cudaMemcpyDefault, s.get());
    if (status != cudaSuccess) {
      free_block(res_.get(), s, fresh, device_);
      throw_cuda_error(status, "cudaMemcpyAsync");
    }
  }
  free_block(res_.get(), s, block_, device_);
  block_    = fresh;
  capacity_ = n;
}

void buffer_memory::free() noexcept
{
  if (adopted_) {
    adopted_.reset();
    return;
  }
  if (block_.raw == nullptr) { return; }
  free_block(res_.get(), stream_, block_, device_);
  block_ = block{};
}

// ------------------------------------------------------------------------------------
// Buffer
// ------------------------------------------------------------------------------------

/// Why a buffer whose memory a resize is moving cannot be used now.
constexpr char being_resized[] =
  "the buffer is being resized (on another thread, or by the call this code runs inside)";

buffer_memory& Buffer::get(char const* what)
{
  if (!mem.has_value()) {
    throw nb::value_error((std::string{what} + ": the buffer is closed").c_str());
  }
  if (mutating) {
    PyErr_Format(PyExc_BufferError, "%s: %s", what, being_resized);
    throw nb::python_error();
  }
  return *mem;
}

void Buffer::list_holder() noexcept
{
  auto* r = nb::inst_ptr<DeviceMemoryResource>(mr);
  if (r->calls_python) {
    r->holders.add(this);
    listed_in = r;
  }
}

namespace {

[[noreturn]] void buffer_error(char const* what, std::string const& why)
{
  PyErr_Format(PyExc_BufferError, "%s: %s", what, why.c_str());
  throw nb::python_error();
}

std::string exports_text(int n)
{
  return "the buffer has " + std::to_string(n) + " live export" + (n == 1 ? "" : "s") +
         " (memoryview, NumPy array or DLPack tensor); release " +
         (n == 1 ? "it" : "them") + " first";
}

}  // namespace

bool Buffer::release(release_mode mode)
{
  if (!mem.has_value()) { return true; }
  if (mode == release_mode::close) {
    if (mutating || readers != 0) {
      buffer_error("close",
                   "the buffer is in use by a copy or resize still running (on another "
                   "thread, or the call this code runs inside)");
    }
    if (exports != 0) { buffer_error("close", exports_text(exports)); }
  } else if (exports != 0 || readers != 0 || mutating) {
    return false;  // the memory is still in use: it is freed when the buffer dies
  }
  bool const gil = holds_gil();
  if (gil && mr.is_valid() && would_reenter(mr)) {
    // Inside a Python callback of the resource this memory goes back to: the free waits.
    mem->free_later(mr);
  } else if (gil) {
    waiting_frees::perform();
  }
  // An empty allocation, or one whose free waits, frees nothing: its share of the
  // resource is not the last (`mr` holds one until it is cleared). Drop it here, with the
  // GIL and without moving it out first.
  if (mem->holds_nothing() && mr.is_valid() &&
      nb::inst_ptr<DeviceMemoryResource>(mr)->res.has_value()) {
    mem.reset();
    if (listed_in != nullptr) {
      listed_in->holders.remove(this);
      listed_in = nullptr;
    }
    return true;
  }
  // Take the memory out while holding the GIL, so that no other thread sees it half freed.
  std::optional<buffer_memory> taken{std::move(*mem)};
  mem.reset();
  if (listed_in != nullptr) {
    listed_in->holders.remove(this);
    listed_in = nullptr;
  }
  // An empty allocation frees nothing; its share of the resource is not the last (`mr`
  // holds one until it is cleared).
  bool const frees_nothing = taken->holds_nothing() && mr.is_valid() &&
                             nb::inst_ptr<DeviceMemoryResource>(mr)->res.has_value();
  if (!frees_nothing && gil) {
    gil_release release;
    taken.reset();
  } else {
    taken.reset();
  }
  return true;
}

namespace {

struct DeviceBuffer : Buffer {};

PyTypeObject* buffer_type = nullptr;

Buffer& buffer_of(nb::handle obj) { return *nb::inst_ptr<Buffer>(obj); }

/// Whether `obj` is an nbrmm.Buffer (or of a subclass), its __init__ run or not.
bool of_buffer_type(nb::handle obj) noexcept
{
  return buffer_type != nullptr && PyType_IsSubtype(Py_TYPE(obj.ptr()), buffer_type);
}

bool is_buffer(nb::handle obj) noexcept { return of_buffer_type(obj) && nb::inst_ready(obj); }

/// The entries of another library's `__cuda_array_interface__`, read with checks; the
/// messages name `param` and the entry.
class interface_reader {
 public:
  interface_reader(nb::object cai, char const* param) : cai_{std::move(cai)}, param_{param}
  {
    if (!PyDict_Check(cai_.ptr())) {
      throw nb::type_error((std::string{param} +
                            ": __cuda_array_interface__ must be a dict, got " + type_of(cai_))
                             .c_str());
    }
  }

  /// The entry `key` (a reference of its own: the entries' code may empty the dict); KeyError
  /// when it is missing.
  [[nodiscard]] nb::object get(char const* key) const
  {
    nb::object value = optional(key);
    if (!value.is_valid()) {
      std::string const text = std::string{param_} + ": __cuda_array_interface__ has no '" +
                               key + "'";
      PyErr_SetObject(PyExc_KeyError, nb::str(text.c_str()).ptr());
      throw nb::python_error();
    }
    return value;
  }

  /// The entry `key` (a reference of its own), or an invalid object when it is missing or
  /// None.
  [[nodiscard]] nb::object optional(char const* key) const
  {
    PyObject* value = PyDict_GetItemString(cai_.ptr(), key);  // (borrowed)
    return value == nullptr || value == Py_None ? nb::object{} : nb::borrow(value);
  }

  /// The tuple or list `key`, as a tuple.
  [[nodiscard]] nb::tuple sequence(char const* key) const
  {
    nb::object const value = get(key);
    if (!PyTuple_Check(value.ptr()) && !PyList_Check(value.ptr())) {
      throw nb::type_error((where(key) + " must be a tuple, got " + type_of(value)).c_str());
    }
    PyObject* items = PySequence_Tuple(value.ptr());  // (a subclass's __iter__ may raise)
    if (items == nullptr) { throw nb::python_error(); }
    return nb::steal<nb::tuple>(items);
  }

  /// The str `key`.
  [[nodiscard]] std::string text(char const* key) const
  {
    nb::object const value = get(key);
    if (!PyUnicode_Check(value.ptr())) {
      throw nb::type_error((where(key) + " must be a str, got " + type_of(value)).c_str());
    }
    return utf8(value);
  }

  /// `value`, an int from 0 to 2**64 - 1 read from the entry `key`.
  [[nodiscard]] std::uint64_t integer(nb::handle value, char const* key) const
  {
    if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
      throw nb::type_error((std::string{param_} + ": an int is expected in " + entry(key) +
                            ", got " + type_of(value))
                             .c_str());
    }
    unsigned long long const v = PyLong_AsUnsignedLongLong(value.ptr());
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      throw_range_error(where(key) + " holds " + utf8(value) +
                        "; expected an int from 0 to 2**64 - 1");
    }
    return v;
  }

 private:
  [[nodiscard]] static std::string entry(char const* key)
  {
    return std::string{"__cuda_array_interface__['"} + key + "']";
  }
  [[nodiscard]] std::string where(char const* key) const
  {
    return std::string{param_} + ": " + entry(key);
  }

  nb::object cai_;
  char const* param_;
};

/// A contiguous device array given by __cuda_array_interface__ (or an nbrmm Buffer, which
/// stays pinned as a reader while this object lives).
class device_source {
 public:
  device_source(nb::handle obj, char const* param)
  {
    if (is_buffer(obj)) {
      reader_.emplace(buffer_of(obj), param);
      ptr_  = reader_->memory().data();
      size_ = reader_->memory().size();
      return;
    }
    // A class's __cuda_array_interface__ is the unbound property, not an array's; a Buffer
    // here is one whose __init__ never ran: no array either (the message says which).
    nb::object const interface = PyType_Check(obj.ptr()) || of_buffer_type(obj)
                                   ? nb::object{}
                                   : optional_attr(obj, "__cuda_array_interface__");
    if (!interface.is_valid()) {
      // ValueError, as rmm raises for an object without the interface.
      throw nb::value_error((std::string{param} +
                            ": expected an object with __cuda_array_interface__, got " +
                            type_of(obj, nb::type<Buffer>()))
                             .c_str());
    }
    // Another library's dict, read with checks: a malformed one is that library's error,
    // reported naming the entry (the classes are rmm's: KeyError for a missing entry,
    // TypeError for a wrong type, IndexError for an empty `data`).
    interface_reader const cai{interface, param};
    nb::tuple const shape = cai.sequence("shape");
    std::string const typestr = cai.text("typestr");
    std::size_t itemsize      = 0;
    try {
      itemsize = std::stoul(typestr.substr(2));
    } catch (std::exception const&) {
      throw nb::value_error((std::string{param} + ": bad typestr '" + typestr + "'").c_str());
    }
    std::size_t count = 1;
    for (nb::handle dim : shape) {
      auto const extent = cai.integer(dim, "shape");
      if (extent != 0 && count > max_request / extent) {
        throw nb::value_error((std::string{param} + ": the array is too large").c_str());
      }
      count *= extent;
    }
    if (itemsize != 0 && count > max_request / itemsize) {
      throw nb::value_error((std::string{param} + ": the array is too large").c_str());
    }
    if (cai.optional("strides").is_valid()) {
      nb::tuple const strides = cai.sequence("strides");
      if (nb::len(strides) != nb::len(shape)) {
        throw nb::value_error((std::string{param} + ": __cuda_array_interface__['strides'] has " +
                               std::to_string(nb::len(strides)) + " entries for " +
                               std::to_string(nb::len(shape)) + " dimensions")
                                .c_str());
      }
      std::size_t expected = itemsize;
      for (std::size_t i = nb::len(shape); i-- > 0;) {
        auto const extent = cai.integer(shape[i], "shape");
        if (extent > 1 && cai.integer(strides[i], "strides") != expected) {
          throw nb::value_error(
            (std::string{param} + ": the device array is not C-contiguous").c_str());
        }
        expected *= extent;
      }
    }
    nb::tuple const data = cai.sequence("data");
    if (nb::len(data) == 0) {
      PyErr_SetString(PyExc_IndexError,
                      (std::string{param} +
                       ": __cuda_array_interface__['data'] must be a (pointer, read-only) tuple")
                        .c_str());
      throw nb::python_error();
    }
    auto const ptr = cai.integer(data[0], "data");
    if (nb::object const stream = cai.optional("stream"); stream.is_valid()) {
      // The producer asks consumers to order on its stream: wait for it.
      auto const producer = reinterpret_cast<cudaStream_t>(cai.integer(stream, "stream"));
      gil_release release;
      auto const status = cudaStreamSynchronize(producer);
      if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
    }
    ptr_  = reinterpret_cast<void const*>(ptr);
    size_ = count * itemsize;
    keep_ = nb::borrow(obj);
  }
  [[nodiscard]] void const* data() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::optional<buffer_reader> reader_;
  nb::object keep_;
  void const* ptr_{nullptr};
  std::size_t size_{0};
};

// ------------------------------------------------------------------------------------
// Making buffers: one parser, one constructor
// ------------------------------------------------------------------------------------

/// The arguments of every entry point that makes a buffer, checked: size, alignment,
/// stream and resource (read last: `mr=None` reads the current resource from librmm's map).
struct buffer_args {
  std::size_t n{0};
  std::size_t alignment{default_alignment};
  nb::object mr;
  nb::object stream;
};

/// Parses what Buffer(nbytes, *, mr, stream, alignment) and its relatives take; a null
/// handle is an omitted argument. `size` is a size known already (a copy, an upload).
buffer_args parse_buffer_args(nb::handle nbytes,
                              char const* size_param,
                              nb::handle mr,
                              nb::handle stream,
                              nb::handle alignment,
                              std::optional<std::size_t> size = std::nullopt)
{
  buffer_args a;
  if (alignment.is_valid()) { a.alignment = alignment_arg(alignment); }
  if (size.has_value()) {
    check_request(*size, a.alignment, size_param);
    a.n = *size;
  } else if (nbytes.is_valid()) {
    a.n = request_size(nbytes, size_param, a.alignment);
  }
  if (stream.is_valid()) {
    a.stream = stream_object(stream, "stream");
  } else {
    a.stream = default_stream();
  }
  a.mr = resource_or_current(mr.is_valid() ? mr : nb::handle{Py_None}, "mr");
  check_reentry(a.mr, "mr");
  return a;
}

/// Constructs `self` (raw storage) as a buffer of `a` and, when `src` is given, copies
/// `a.n` bytes from it (a host or device pointer). On failure nothing is left behind: no
/// memory, no reference, no constructed object.
void construct(Buffer* self, buffer_args&& a, void const* src = nullptr)
{
  auto* r                                     = nb::inst_ptr<DeviceMemoryResource>(a.mr);
  std::shared_ptr<device_resource> const& res = r->shared();
  cuda::stream_ref const s                    = nb::inst_ptr<Stream>(a.stream)->ref();
  nb::object const resource = a.mr;  // (for the report of an out-of-memory error)
  waiting_frees::perform();
  new (self) Buffer{};
  try {
    {
      std::optional<librmm_call> call;
      if (a.n != 0) { call.emplace(); }  // an empty buffer allocates nothing: no CUDA call
      self->mem.emplace(a.n, a.alignment, s, res, r->device);
    }
    self->device = r->device >= 0 ? r->device : current_device();
    self->mr     = std::move(a.mr);
    self->stream = std::move(a.stream);
    self->list_holder();
    if (src != nullptr) { copy_bytes(self->mem->data(), src, a.n, s); }
  } catch (rmm::out_of_memory const&) {
    self->~Buffer();
    raise_out_of_memory(resource, a.n, r->device, s.get());
  } catch (...) {
    self->~Buffer();
    throw;
  }
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

/// A new buffer of class `cls` holding a copy of `n` bytes at `src`, allocated from `mr`
/// (None: the current resource) on `stream`.
nb::object buffer_from(nb::handle cls, void const* src, std::size_t n, nb::handle mr,
                       nb::handle stream, std::size_t alignment = default_alignment)
{
  buffer_args a = parse_buffer_args(nb::handle{}, "nbytes", mr, stream, nb::handle{}, n);
  a.alignment   = alignment;
  return new_buffer(cls, [&](Buffer* self) { construct(self, std::move(a), src); });
}

/// A new buffer of the same class and contents, from `mr` and on `stream` (None: the
/// buffer's own resource and stream, as rmm's copy() does).
nb::object copy_of(nb::handle py_self, nb::handle mr, nb::handle stream)
{
  Buffer& self = initialized<Buffer>(py_self, "copy");
  buffer_reader reader{self, "copy"};
  auto& b = reader.memory();
  return buffer_from(py_self.type(), b.data(), b.size(), mr.is_none() ? self.mr : mr,
                     stream.is_none() ? self.stream : stream, b.alignment());
}

nb::object to_device(nb::handle cls, nb::handle b, nb::handle stream, nb::handle mr)
{
  host_view view{b, false, "b"};
  return buffer_from(cls, view.data(), view.size(), mr, stream);
}

// ------------------------------------------------------------------------------------
// Copies in and out
// ------------------------------------------------------------------------------------

nb::object numpy_empty(std::size_t n)
{
  // numpy is a dependency of nbrmm (as of rmm): copy_to_host() always returns an ndarray.
  return nb::module_::import_("numpy").attr("empty")(n, "u1");
}

nb::object copy_to_host(Buffer& self, nb::handle ary, nb::handle stream)
{
  cuda::stream_ref s = stream_arg(stream, "stream");
  std::size_t const n = self.get("copy_to_host").size();
  nb::object out     = ary.is_none() ? numpy_empty(n) : nb::borrow(ary);
  host_view view{out, true, "ary"};
  buffer_reader reader{self, "copy_to_host"};
  auto& b = reader.memory();
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
  cuda::stream_ref s = stream_arg(stream, "stream");
  host_view view{ary, false, "ary"};
  buffer_reader reader{self, "copy_from_host"};
  auto& b = reader.memory();
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
  cuda::stream_ref s = stream_arg(stream, "stream");
  device_source src{cuda_ary, "cuda_ary"};
  buffer_reader reader{self, "copy_from_device"};
  auto& b = reader.memory();
  if (src.size() > b.size()) {
    throw nb::value_error(("cuda_ary: " + std::to_string(src.size()) +
                           " bytes do not fit in a buffer of " + std::to_string(b.size()) +
                           " bytes")
                            .c_str());
  }
  copy_bytes(b.data(), src.data(), src.size(), s);
}

nb::bytes to_bytes(Buffer& self, nb::handle stream)
{
  cuda::stream_ref s = stream_arg(stream, "stream");
  buffer_reader reader{self, "tobytes"};
  auto& b        = reader.memory();
  nb::object out = nb::steal(PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(b.size())));
  if (!out.is_valid()) { throw nb::python_error(); }
  copy_bytes(PyBytes_AsString(out.ptr()), b.data(), b.size(), s);
  if (!is_legacy_default(s.get())) {
    gil_release release;
    auto const status = cudaStreamSynchronize(s.get());
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
  }
  return nb::steal<nb::bytes>(out.release());
}

// ------------------------------------------------------------------------------------
// Growing and shrinking
// ------------------------------------------------------------------------------------

/// Runs `fn(memory, stream)` (a resize, reserve or shrink_to_fit) with the buffer's device
/// current and the GIL released, then records `stream`. `moves` says whether it would move
/// the memory, which no export, reader or other thread may see.
template <class Fn>
void mutate(Buffer& self, nb::handle stream, char const* what, bool (*moves)(buffer_memory const&, std::size_t), std::size_t n, Fn&& fn)
{
  nb::object s_obj   = stream_object(stream, "stream");
  cuda::stream_ref s = nb::inst_ptr<Stream>(s_obj)->ref();
  auto& b            = self.get(what);
  if (self.readers != 0) {
    buffer_error(what,
                 "the buffer is in use by a copy still running (on another thread, or the "
                 "call this code runs inside)");
  }
  if (moves(b, n)) {
    if (self.exports != 0) { buffer_error(what, exports_text(self.exports)); }
    check_reentry(self.mr, what);
  }
  self.mutating = true;
  try {
    librmm_call call;
    device_scope const on_device{self.device};
    fn(b, s);
  } catch (...) {
    self.mutating = false;
    throw;
  }
  self.mutating = false;
  self.stream   = std::move(s_obj);
}

// ------------------------------------------------------------------------------------
// Exports: __cuda_array_interface__, DLPack, the buffer protocol
// ------------------------------------------------------------------------------------

nb::dict cuda_array_interface(Buffer& self)
{
  auto& b = self.get("__cuda_array_interface__");
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
  if (!PyLong_Check(consumer.ptr()) || PyBool_Check(consumer.ptr())) {
    throw nb::type_error(("stream: expected an int (a stream handle), got " +
                          type_of(consumer))
                           .c_str());
  }
  int overflow = 0;
  long long const value = PyLong_AsLongLongAndOverflow(consumer.ptr(), &overflow);
  if (overflow == 0 && value == -1) { return; }  // the consumer asks for no synchronization
  // A handle is an address: 0 to 2**64 - 1.
  unsigned long long const handle = PyLong_AsUnsignedLongLong(consumer.ptr());
  if (handle == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    throw nb::value_error(("stream: " + utf8(nb::repr(consumer)) +
                           " is not a stream handle (an int from 0 to 2**64 - 1, or -1 for "
                           "no synchronization)")
                            .c_str());
  }
  cudaStream_t const target = reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(handle));
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
  auto& b          = self.get("__dlpack_device__");
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

/// The owner of a DLPack export: counts as an export of the buffer while it lives.
nb::object export_token(nb::handle py_self)
{
  Buffer& self = buffer_of(py_self);
  nb::object token = nb::steal(PyCapsule_New(py_self.ptr(), "nbrmm.buffer_export", [](PyObject* cap) {
    auto* obj = static_cast<PyObject*>(PyCapsule_GetPointer(cap, "nbrmm.buffer_export"));
    if (obj == nullptr) {
      PyErr_Clear();
      return;
    }
    --nb::inst_ptr<Buffer>(obj)->exports;
    Py_DECREF(obj);
  }));
  if (!token.is_valid()) { throw nb::python_error(); }
  Py_INCREF(py_self.ptr());
  ++self.exports;
  return token;
}

nb::object dlpack(nb::handle_t<Buffer> py_self, nb::handle stream, nb::kwargs kwargs)
{
  Buffer& self = initialized<Buffer>(py_self, "__dlpack__");
  auto& b      = self.get("__dlpack__");
  order_for_consumer(self, stream);
  auto const [type, id] = dlpack_device(self);
  size_t shape[1]       = {b.size()};
  nb::object token      = export_token(py_self);
  nb::ndarray<nb::array_api> view(b.data(), 1, shape, token, nullptr, nb::dtype<std::uint8_t>(),
                                 type, id);
  nb::object arr = nb::cast(view, nb::rv_policy::reference);
  return arr.attr("__dlpack__")(**kwargs);
}

int buffer_getbuffer(PyObject* self, Py_buffer* view, int flags)
{
  if (!nb::inst_ready(self)) {
    std::string const text = "the buffer protocol: got an " +
                             utf8(nb::type_name(nb::handle{self}.type())) + not_initialized_note;
    PyErr_SetString(PyExc_TypeError, text.c_str());
    return -1;
  }
  Buffer* b = nb::inst_ptr<Buffer>(self);
  if (!b->mem.has_value()) {
    PyErr_SetString(PyExc_ValueError, "the buffer is closed");
    return -1;
  }
  if (b->mutating) {
    PyErr_SetString(PyExc_BufferError, being_resized);
    return -1;
  }
  if (!nb::inst_ptr<DeviceMemoryResource>(b->mr)->host_accessible) {
    PyErr_SetString(PyExc_BufferError,
                    "the buffer's memory is not host-accessible (use copy_to_host())");
    return -1;
  }
  if (PyBuffer_FillInfo(view, self, b->mem->data(), static_cast<Py_ssize_t>(b->mem->size()), 0,
                        flags) != 0) {
    return -1;
  }
  ++b->exports;
  return 0;
}

void buffer_releasebuffer(PyObject* self, Py_buffer*) { --nb::inst_ptr<Buffer>(self)->exports; }

// ------------------------------------------------------------------------------------
// The type: garbage collector and buffer protocol slots
// ------------------------------------------------------------------------------------

int buffer_traverse(PyObject* self, visitproc visit, void* arg)
{
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) { return 0; }
  Buffer* b = nb::inst_ptr<Buffer>(self);
  Py_VISIT(b->mr.ptr());
  Py_VISIT(b->stream.ptr());
  // Memory adopted from C++ may hold a copy of a Python-made resource: its reference to
  // that resource object is this buffer's while no other copy shares it.
  if (b->mem.has_value()) {
    if (rmm::device_buffer* adopted = b->mem->adopted()) {
      auto ref = adopted->memory_resource();
      if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&ref)) {
        if (auto group = owned->group(); group.use_count() == 1) {
          Py_VISIT(owned->owner().ptr());
        }
      }
    }
  }
  return 0;
}

int buffer_clear(PyObject* self)
{
  if (!nb::inst_ready(self)) { return 0; }
  Buffer* b = nb::inst_ptr<Buffer>(self);
  // Memory still exported stays (with what frees it) until the buffer dies.
  if (b->release(Buffer::release_mode::collect)) {
    b->mr.reset();
    b->stream.reset();
  }
  return 0;
}

/// The slots of Buffer and DeviceBuffer: the garbage collector's and the buffer protocol.
PyType_Slot buffer_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(buffer_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(buffer_clear)},
                              {Py_bf_getbuffer, reinterpret_cast<void*>(buffer_getbuffer)},
                              {Py_bf_releasebuffer, reinterpret_cast<void*>(buffer_releasebuffer)},
                              {0, nullptr}};

std::uintptr_t ptr_of(Buffer& self)
{
  return reinterpret_cast<std::uintptr_t>(self.get("ptr").data());
}

bool moves_to_reserve(buffer_memory const& b, std::size_t n) { return b.moves_to_reserve(n); }
bool moves_to_resize(buffer_memory const& b, std::size_t n) { return b.moves_to_resize(n); }
bool moves_to_shrink(buffer_memory const& b, std::size_t) { return b.moves_to_shrink(); }

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
    Required alignment: a power of two up to ``2**40``, 256 by default. Honoured whatever
    the resource (larger alignments by allocating a larger block).

Raises
------
MemoryError
    If the resource cannot allocate (``nbrmm.OutOfMemory`` when it is out of memory, or
    ``nbrmm.BadAlloc`` for a size no resource can serve).
TypeError, ValueError
    For an argument of the wrong type or value (the message names it).

Notes
-----
The buffer keeps ``mr`` and ``stream`` alive; its C++ part also owns a copy of the
resource. Copies on the default stream synchronize; on any other stream they are
asynchronous (synchronize the stream before reading the destination).

While a memoryview, NumPy array or DLPack tensor of the buffer is alive, :meth:`close`
and a resize that would move the memory raise ``BufferError`` (as for ``bytearray``).)doc");
  buffer_type = reinterpret_cast<PyTypeObject*>(cls.ptr());

  cls.def(
       "__init__",
       [](Buffer* self, nb::handle nbytes, nb::handle mr, nb::handle stream, nb::handle alignment) {
         init_guard const guard{self};
         construct(self, parse_buffer_args(nbytes, "nbytes", mr, stream, alignment));
       },
       nb::arg("nbytes") = 0, nb::kw_only(), nb::arg("mr") = nb::none(),
       nb::arg("stream").none() = default_stream_arg(), nb::arg("alignment") = default_alignment,
       nb::sig("def __init__(self, nbytes: int | str = 0, *, mr: DeviceMemoryResource | None = "
               "None, stream: nbrmm._typing.CudaStreamLike = ..., alignment: int = 256) -> None"))
    .def_prop_ro("ptr", getter<Buffer>("ptr", &ptr_of), "The device pointer as an int.")
    .def_prop_ro(
      "size", getter<Buffer>("size", [](Buffer& self) { return self.get("size").size(); }),
      "Size in bytes.")
    .def_prop_ro(
      "nbytes", getter<Buffer>("nbytes", [](Buffer& self) { return self.get("nbytes").size(); }),
      "Size in bytes.")
    .def(
      "__len__", method<Buffer>("__len__", [](Buffer& self) { return self.get("len").size(); }),
      "Size in bytes (as ``size``).")
    .def("__sizeof__", method<Buffer>("__sizeof__", [](Buffer& self) {
           return self.mem.has_value() ? self.mem->size() : 0;
         }))
    .def(
      "capacity",
      method<Buffer>("capacity", [](Buffer& self) { return self.get("capacity").capacity(); }),
      "Allocated capacity in bytes (at least ``size``).")
    .def_prop_ro(
      "mr",
      getter<Buffer>("mr", [](Buffer& self) { return self.mr.is_valid() ? self.mr : nb::none(); }),
      nb::for_getter(nb::sig("def mr(self, /) -> DeviceMemoryResource")),
      "The resource object that allocated the memory and will free it.")
    .def_prop_ro(
      "stream",
      getter<Buffer>("stream",
                     [](Buffer& self) { return self.stream.is_valid() ? self.stream : nb::none(); }),
      nb::for_getter(nb::sig("def stream(self, /) -> Stream")),
      "The stream the buffer's memory is ordered on.")
    .def_prop_ro(
      "device", getter<Buffer>("device", [](Buffer& self) { return self.device; }),
      "The device the memory lives on.")
    .def_prop_ro(
      "alignment",
      getter<Buffer>("alignment", [](Buffer& self) { return self.get("alignment").alignment(); }),
      "The alignment the memory was allocated with (the pointer is a multiple of it).")
    .def_prop_ro(
      "closed", getter<Buffer>("closed", [](Buffer& self) { return !self.mem.has_value(); }),
      "Whether :meth:`close` has freed the memory.")
    .def(
      "reserve",
      method<Buffer>("reserve", [](Buffer& self, nb::handle new_capacity, nb::handle stream) {
        std::size_t const n = request_size(new_capacity, "new_capacity",
                                           self.get("reserve").alignment());
        mutate(self, stream, "reserve", &moves_to_reserve, n,
               [n](auto& b, auto s) { b.reserve(n, s); });
      }),
      nb::arg("new_capacity"), nb::arg("stream").none() = default_stream_arg(),
      nb::sig("def reserve(self, new_capacity: int | str, stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
      R"doc(Grow the capacity to at least ``new_capacity`` bytes, keeping the contents.

Raises
------
BufferError
    If the memory would move while it is exported or in use by a copy still running.)doc")
    .def(
      "resize",
      method<Buffer>("resize", [](Buffer& self, nb::handle new_size, nb::handle stream) {
        std::size_t const n = request_size(new_size, "new_size", self.get("resize").alignment());
        mutate(self, stream, "resize", &moves_to_resize, n,
               [n](auto& b, auto s) { b.resize(n, s); });
      }),
      nb::arg("new_size"), nb::arg("stream").none() = default_stream_arg(),
      nb::sig("def resize(self, new_size: int | str, stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
      R"doc(Resize to ``new_size`` bytes on the buffer's own resource, keeping the prefix.

Raises
------
BufferError
    If the memory would move while it is exported or in use by a copy still running.)doc")
    .def(
      "shrink_to_fit",
      method<Buffer>("shrink_to_fit", [](Buffer& self, nb::handle stream) {
        mutate(self, stream, "shrink_to_fit", &moves_to_shrink, 0,
               [](auto& b, auto s) { b.shrink_to_fit(s); });
      }),
      nb::arg("stream").none() = default_stream_arg(),
      nb::sig("def shrink_to_fit(self, stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
      R"doc(Release unused capacity.

Raises
------
BufferError
    If the memory would move while it is exported or in use by a copy still running.)doc")
    .def(
      "copy",
      [](nb::handle_t<Buffer> py_self, nb::handle mr, nb::handle stream) {
        return copy_of(py_self, mr, stream);
      },
      nb::arg("mr") = nb::none(), nb::arg("stream") = nb::none(),
      nb::sig("def copy(self, mr: DeviceMemoryResource | None = None, stream: nbrmm._typing.CudaStreamLike | None = None) -> typing.Self"),
      R"doc(A new buffer with the same contents.

Parameters
----------
mr : DeviceMemoryResource, optional
    Where to allocate the copy; the buffer's own resource by default (as rmm does).
stream : Stream, optional
    The stream of the copy; the buffer's own stream by default.)doc")
    .def(
      "__copy__",
      [](nb::handle_t<Buffer> py_self) { return copy_of(py_self, nb::none(), nb::none()); },
      nb::sig("def __copy__(self) -> typing.Self"),
      "A copy on the buffer's own resource and stream (as :meth:`copy`).")
    .def(
      "__deepcopy__",
      [](nb::handle_t<Buffer> py_self, nb::handle) {
        return copy_of(py_self, nb::none(), nb::none());
      },
      nb::arg("memo"), nb::sig("def __deepcopy__(self, memo: dict[int, typing.Any]) -> typing.Self"),
      "A copy on the buffer's own resource and stream (as :meth:`copy`).")
    .def("copy_to_host", method<Buffer>("copy_to_host", &copy_to_host), nb::arg("ary") = nb::none(),
         nb::arg("stream").none() = default_stream_arg(),
         nb::sig("def copy_to_host(self, ary: nbrmm._typing.HostBufferT | None = None, "
                 "stream: nbrmm._typing.CudaStreamLike = ...) -> nbrmm._typing.HostBufferT"),
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
    .def("copy_from_host", method<Buffer>("copy_from_host", &copy_from_host), nb::arg("ary").none(),
         nb::arg("stream").none() = default_stream_arg(),
         nb::sig("def copy_from_host(self, ary: typing_extensions.Buffer | numpy.typing.NDArray[typing.Any], "
                 "stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
         "Copy a C-contiguous host buffer of at most ``size`` bytes into the buffer.")
    .def("copy_from_device", method<Buffer>("copy_from_device", &copy_from_device),
         nb::arg("cuda_ary").none(),
         nb::arg("stream").none() = default_stream_arg(),
         nb::sig("def copy_from_device(self, cuda_ary: nbrmm._typing.CudaArrayLike, "
                 "stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
         "Copy a C-contiguous device array (``__cuda_array_interface__``) of at most ``size`` "
         "bytes into the buffer.")
    .def("tobytes", method<Buffer>("tobytes", &to_bytes),
         nb::arg("stream").none() = default_stream_arg(),
         nb::sig("def tobytes(self, stream: nbrmm._typing.CudaStreamLike = ...) -> bytes"),
         "The contents as ``bytes`` (always synchronizes).")
    .def(
      "__bytes__",
      method<Buffer>("__bytes__",
                     [](Buffer& self) { return to_bytes(self, default_stream_arg()); }),
      "The contents as ``bytes`` (as :meth:`tobytes`).")
    .def_static(
      "to_device",
      [](nb::handle b, nb::handle stream, nb::handle mr) {
        return to_device(nb::handle{reinterpret_cast<PyObject*>(buffer_type)}, b, stream, mr);
      },
      nb::arg("b").none(), nb::arg("stream").none() = default_stream_arg(), nb::arg("mr") = nb::none(),
      nb::sig("def to_device(b: typing_extensions.Buffer | numpy.typing.NDArray[typing.Any], "
              "stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> Buffer"),
      "A new buffer holding a copy of the host buffer ``b`` (allocated from ``mr``, default: "
      "the current device resource).")
    .def(
      "prefetch",
      method<Buffer>("prefetch", [](Buffer& self, nb::handle device, nb::handle stream) {
        // -1 (cudaCpuDeviceId): the host
        int const target = device.is_none() ? self.device : int_arg(device, "device");
        if (target != cudaCpuDeviceId && target != self.device) { check_device(target, "device"); }
        cuda::stream_ref s = stream.is_none() ? nb::inst_ptr<Stream>(self.stream)->ref()
                                              : stream_arg(stream, "stream");
        buffer_reader reader{self, "prefetch"};
        auto& b = reader.memory();
        if (b.size() == 0) { return; }
        gil_release release;
        rmm::prefetch(b.data(), b.size(), rmm::cuda_device_id{target}, s);
      }),
      nb::arg("device") = nb::none(), nb::arg("stream") = nb::none(),
      nb::sig("def prefetch(self, device: int | None = None, "
              "stream: nbrmm._typing.CudaStreamLike | None = None) -> None"),
      "Prefetch managed memory to ``device`` (``cudaCpuDeviceId`` = -1 for the host); a "
      "no-op for memory that is not managed.")
    .def(
      "close",
      method<Buffer>("close", [](Buffer& self) { self.release(Buffer::release_mode::close); }),
      R"doc(Free the memory now; any later use of the buffer raises ValueError.

Closing a closed buffer does nothing.

Raises
------
BufferError
    While the buffer is exported (a memoryview, NumPy array or DLPack tensor of it is
    alive) or in use by a copy or resize still running.)doc")
    .def(
      "__enter__",
      [](nb::handle_t<Buffer> self) {
        if (!initialized<Buffer>(self, "__enter__").mem.has_value()) {
          throw nb::value_error("__enter__: the buffer is closed");
        }
        return nb::borrow(self);
      },
      nb::sig("def __enter__(self) -> typing.Self"),
      "The buffer itself; leaving the ``with`` block closes it (a closed buffer raises "
      "ValueError, as a closed file does).")
    .def(
      "__exit__",
      method<Buffer>("__exit__", [](Buffer& self, nb::handle, nb::handle, nb::handle) {
        self.release(Buffer::release_mode::close);
      }),
      nb::arg("exc_type").none(), nb::arg("exc_value").none(), nb::arg("traceback").none(),
      nb::sig("def __exit__(self, exc_type: type[BaseException] | None, "
              "exc_value: BaseException | None, traceback: types.TracebackType | None) -> None"),
      "Close the buffer (see :meth:`close`).")
    .def_prop_ro("__cuda_array_interface__",
                 getter<Buffer>("__cuda_array_interface__", &cuda_array_interface),
                 nb::for_getter(nb::sig(
                   "def __cuda_array_interface__(self, /) -> nbrmm._typing.CudaArrayInterface")),
                 "CUDA array interface (version 3): a 1-D ``uint8`` array with its stream.")
    .def("__dlpack__", &dlpack, nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("kwargs"),
         nb::sig("def __dlpack__(self, *, stream: int | None = None, **kwargs: typing.Any) -> "
                 "typing_extensions.CapsuleType"),
         "DLPack export (1-D ``uint8``); the consumer's ``stream`` is ordered after the "
         "buffer's stream. The tensor keeps the buffer alive and counts as an export.")
    .def(
      "__dlpack_device__",
      method<Buffer>("__dlpack_device__", [](Buffer& self) { return dlpack_device(self); }),
      "``(device_type, device_id)`` of the memory for DLPack.")
    .def("__repr__", [](nb::handle_t<Buffer> py_self) {
      std::string text = "<" + utf8(nb::type_name(py_self.type()));
      if (!nb::inst_ready(py_self)) { return text + " (not initialized)>"; }
      Buffer& self = buffer_of(py_self);
      if (!self.mem.has_value()) { return text + " (closed)>"; }
      char ptr[32];
      std::snprintf(ptr, sizeof ptr, "0x%llx",
                    static_cast<unsigned long long>(
                      reinterpret_cast<std::uintptr_t>(self.mem->data())));
      text.append(" size=")
        .append(std::to_string(self.mem->size()))
        .append(" ptr=")
        .append(ptr)
        .append(">");
      return text;
    });

  cls.def_static(
    "_from_capsule",
    [](nb::capsule capsule, nb::handle stream_obj) {
      auto* owned =
        static_cast<rmm::device_buffer*>(PyCapsule_GetPointer(capsule.ptr(), NBRMM_BUFFER_CAPSULE));
      if (owned == nullptr) { throw nb::python_error(); }
      if (PyCapsule_GetContext(capsule.ptr()) != nullptr) {
        throw nb::value_error("this rmm::device_buffer was already handed to Python");
      }
      // The stream object the caller names keeps the buffer's stream alive (a Stream the
      // caller made, say); without one, the buffer's stream is borrowed by handle.
      nb::object stream;
      if (stream_obj.is_none()) {
        stream = stream_for_handle(owned->stream().get());
      } else {
        stream = stream_object(stream_obj, "stream");
        auto const given = nb::inst_ptr<Stream>(stream)->ref().get();
        if (given != owned->stream().get()) {
          throw nb::value_error(
            ("stream: its handle (" +
             std::to_string(reinterpret_cast<std::uintptr_t>(given)) +
             ") is not the stream of the rmm::device_buffer (" +
             std::to_string(reinterpret_cast<std::uintptr_t>(owned->stream().get())) + ")")
              .c_str());
        }
      }
      // The buffer owns its resource; its `mr` is the Python object for that resource.
      int const device = current_device();
      nb::object mr     = wrap_resource(device_resource{owned->memory_resource()}, device);
      nb::object out = new_buffer(nb::handle{reinterpret_cast<PyObject*>(buffer_type)},
                                  [&](Buffer* self) {
                                    new (self) Buffer{};
                                    self->mem.emplace(std::move(*owned));
                                    self->device = device;
                                    self->mr     = std::move(mr);
                                    self->stream = std::move(stream);
                                    self->list_holder();
                                  });
      PyCapsule_SetContext(capsule.ptr(), capsule.ptr());  // adopted: the capsule is empty now
      return out;
    },
    nb::arg("capsule"), nb::arg("stream").none() = nb::none(),
    nb::sig("def _from_capsule(capsule: typing_extensions.CapsuleType, "
            "stream: nbrmm._typing.CudaStreamLike | None = None) -> Buffer"),
    "Adopt an ``rmm::device_buffer`` handed over by C++ (see ``<nbrmm/nbrmm.hpp>``); "
    "``stream``, when given, is the object the buffer keeps as its stream (its handle must "
    "be the buffer's).");

  nb::class_<DeviceBuffer, Buffer>(m, "DeviceBuffer", nb::type_slots(buffer_slots),
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
      [](DeviceBuffer* self, nb::handle ptr, nb::handle size, nb::handle stream, nb::handle mr) {
        init_guard const guard{self};
        auto const src = static_cast<std::uintptr_t>(uint_arg(ptr, "ptr"));
        construct(self, parse_buffer_args(size, "size", mr, stream, nb::handle{}),
                  reinterpret_cast<void const*>(src));
      },
      nb::kw_only(), nb::arg("ptr").none() = 0, nb::arg("size") = 0,
      nb::arg("stream").none() = default_stream_arg(), nb::arg("mr") = nb::none(),
      nb::sig("def __init__(self, *, ptr: int = 0, size: int | str = 0, "
              "stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> None"))
    .def_static(
      "to_device",
      [](nb::handle b, nb::handle stream, nb::handle mr) {
        return to_device(nb::type<DeviceBuffer>(), b, stream, mr);
      },
      nb::arg("b").none(), nb::arg("stream").none() = default_stream_arg(), nb::arg("mr") = nb::none(),
      nb::sig("def to_device(b: typing_extensions.Buffer | numpy.typing.NDArray[typing.Any], "
              "stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> DeviceBuffer"),
      "A new DeviceBuffer holding a copy of the host buffer ``b``.");

  m.def(
    "to_device",
    [](nb::handle b, nb::handle stream, nb::handle mr) {
      return to_device(nb::type<DeviceBuffer>(), b, stream, mr);
    },
    nb::arg("b").none(), nb::arg("stream").none() = default_stream_arg(), nb::arg("mr") = nb::none(),
    nb::sig("def to_device(b: typing_extensions.Buffer | numpy.typing.NDArray[typing.Any], "
            "stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> DeviceBuffer"),
    "A new DeviceBuffer holding a copy of the host buffer ``b`` (allocated from ``mr``, "
    "default: the current device resource).");
}

}  // namespace nbrmm
