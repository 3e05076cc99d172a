// The C++ side of nbrmm.Buffer: its memory, and the rules that keep that memory valid while
// anything uses it.
//
// A Buffer owns its memory and co-owns the C++ copy of its resource that the resource
// object keeps for its Buffers (memory handed over by C++ stays an rmm::device_buffer with
// its own copy), and keeps the Python resource object (`mr`) and stream object alive.
//
// While memory is in use outside the GIL or lent out, nothing may free or move it:
//  * exports (the buffer protocol, DLPack): `close()` and a resize, reserve or
//    shrink_to_fit that would move the block raise BufferError while one is alive (as
//    `bytearray` does); the free of a collected buffer waits for them;
//  * readers (copies, which release the GIL while they read or write the memory): every
//    operation that would free or move the memory raises BufferError meanwhile;
//  * a resize, reserve or shrink_to_fit in progress: every other use raises BufferError.
#pragma once

#include "core/gil.hpp"
#include "resources/resource.hpp"
#include "resources/waiting_frees.hpp"

#include <memory>
#include <optional>
#include <utility>

namespace nbrmm {

/// The memory of a Buffer: a block allocated directly from the buffer's resource (the fast
/// path: no rmm::device_buffer bookkeeping), or an rmm::device_buffer handed over by C++.
/// Members that allocate, copy or free are called without the GIL.
class buffer_memory {
 public:
  buffer_memory(std::size_t n,
                std::size_t alignment,
                cuda::stream_ref stream,
                std::shared_ptr<device_resource> const& res,
                int device);
  explicit buffer_memory(rmm::device_buffer&& adopted);
  buffer_memory(buffer_memory&& other) noexcept;
  buffer_memory(buffer_memory const&)            = delete;
  buffer_memory& operator=(buffer_memory const&) = delete;
  buffer_memory& operator=(buffer_memory&&)      = delete;
  ~buffer_memory() { free(); }

  /// Whether destroying this object frees nothing (and so cannot enter CUDA).
  [[nodiscard]] bool holds_nothing() const noexcept { return !adopted_ && block_.raw == nullptr; }
  [[nodiscard]] void* data() const noexcept { return adopted_ ? adopted_->data() : block_.data; }
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
  /// The rmm::device_buffer handed over by C++ (null otherwise).
  [[nodiscard]] rmm::device_buffer* adopted() const noexcept { return adopted_.get(); }

  /// Hands the free to waiting_frees (it must wait: this thread runs a Python callback of
  /// the resource); `owner` is the resource object. Call with the GIL held; this object
  /// holds nothing afterwards.
  void free_later(nb::handle owner) noexcept;

  [[nodiscard]] bool moves_to_reserve(std::size_t n) const noexcept { return n > capacity(); }
  [[nodiscard]] bool moves_to_resize(std::size_t n) const noexcept { return n > capacity(); }
  [[nodiscard]] bool moves_to_shrink() const noexcept { return capacity() > size(); }

  void reserve(std::size_t n, cuda::stream_ref s);
  void resize(std::size_t n, cuda::stream_ref s);
  void shrink_to_fit(cuda::stream_ref s);

 private:
  /// Moves the contents into a new block of `n` bytes, ordered on `s`.
  void reallocate(std::size_t n, cuda::stream_ref s);
  void free() noexcept;

  held_resource res_;  ///< a share of the resource object's copy
  block block_;
  std::size_t size_{0};
  std::size_t capacity_{0};
  cuda::stream_ref stream_{cudaStream_t{nullptr}};
  std::size_t alignment_{default_alignment};
  int device_{-1};
  std::unique_ptr<rmm::device_buffer> adopted_;
};

/// Backing struct of `nbrmm.Buffer` (and of `nbrmm.DeviceBuffer`, which adds nothing).
struct Buffer : resource_holder {
  std::optional<buffer_memory> mem;   ///< empty once closed
  nb::object mr;                      ///< the resource object that frees the memory
  nb::object stream;                  ///< the stream the buffer is ordered on
  int device{-1};                     ///< the device the memory lives on
  DeviceMemoryResource* listed_in{nullptr};  ///< `mr` when this buffer is in its holders
  int exports{0};                     ///< live buffer-protocol and DLPack exports
  int readers{0};                     ///< operations reading or writing the memory without the GIL
  bool mutating{false};               ///< a resize, reserve or shrink_to_fit is in progress

  Buffer() noexcept
    : resource_holder{[](resource_holder* self) noexcept {
        static_cast<Buffer*>(self)->release(release_mode::finalize);
      }}
  {
  }
  Buffer(Buffer&&)            = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() { release(release_mode::destroy); }

  /// The memory, for an operation named `what`: ValueError when closed, BufferError while
  /// another thread resizes it.
  buffer_memory& get(char const* what = "the buffer");

  /// Lists this buffer among its resource object's holders when Python code frees its
  /// memory (see DeviceMemoryResource::holders).
  void list_holder() noexcept;

  enum class release_mode {
    close,     ///< close(): raises BufferError while exports or readers exist
    destroy,   ///< the object dies
    collect,   ///< the garbage collector clears it: kept while exported
    finalize,  ///< its resource is finalized as cyclic garbage: kept while exported
  };
  /// Frees the memory (ordered on the buffer's stream) without holding the GIL. Returns
  /// whether the buffer is closed now.
  bool release(release_mode mode);
};

/// Keeps a Buffer's memory from being freed or moved while an operation reads or writes
/// it without the GIL (construct with the GIL held).
class buffer_reader {
 public:
  buffer_reader(Buffer& b, char const* what) : b_{b}, mem_{b.get(what)} { ++b_.readers; }
  buffer_reader(buffer_reader const&)            = delete;
  buffer_reader& operator=(buffer_reader const&) = delete;
  ~buffer_reader() { --b_.readers; }
  [[nodiscard]] buffer_memory& memory() const noexcept { return mem_; }

 private:
  Buffer& b_;
  buffer_memory& mem_;
};

}  // namespace nbrmm
