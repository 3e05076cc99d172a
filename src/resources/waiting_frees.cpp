// Frees that must wait (see waiting_frees.hpp).
#include "resources/waiting_frees.hpp"

#include "core/gil.hpp"

#include <mutex>
#include <utility>
#include <vector>

namespace nbrmm::waiting_frees {
namespace {

/// One waiting free, holding its resource (and the resource's Python object) alive.
struct entry {
  held_resource res;
  block b;
  cudaStream_t stream;
  int device;
  nb::object owner;                             ///< the resource object, kept alive
  std::unique_ptr<rmm::device_buffer> adopted;  ///< freed by its own destructor, if set

  void free() noexcept
  {
    if (adopted) {
      device_scope const on_device{device};
      adopted.reset();
    } else {
      free_block(res.get(), cuda::stream_ref{stream}, b, device);
    }
    res.reset();
  }
};

// Never destroyed: frees may come at exit. The mutex guards the list (the GIL does where
// it is enabled; free-threaded builds need the lock).
std::mutex& list_mutex()
{
  static auto* m = new std::mutex;
  return *m;
}
std::vector<entry>& list()
{
  static auto* l = new std::vector<entry>;
  return *l;
}

}  // namespace

std::atomic<int> detail::count{0};

void add(held_resource& res, block const& b, cudaStream_t stream, int device,
         nb::handle owner, std::unique_ptr<rmm::device_buffer> adopted) noexcept
{
  entry e{std::move(res), b, stream, device, nb::borrow(owner), std::move(adopted)};
  std::lock_guard lock{list_mutex()};
  try {
    list().push_back(std::move(e));
  } catch (...) {
    // Nowhere to keep it: the memory is lost rather than freed into a locked resource.
    (void)e.adopted.release();
    return;
  }
  detail::count.fetch_add(1, std::memory_order_relaxed);
}

void detail::perform_slow() noexcept
{
  if (inside_callback()) { return; }
  std::vector<entry> taken;
  {
    std::lock_guard lock{list_mutex()};
    taken.swap(list());
    count.fetch_sub(static_cast<int>(taken.size()), std::memory_order_relaxed);
  }
  if (taken.empty()) { return; }
  {
    gil_release release;
    for (entry& e : taken) { e.free(); }
  }
  // `taken` goes with the GIL held: it lets go of the resource objects.
}

void forget() noexcept
{
  // The entries (and the resources they hold) are leaked: they belong to the parent.
  std::lock_guard lock{list_mutex()};
  detail::count.store(0, std::memory_order_relaxed);
  new (&list()) std::vector<entry>{};
}

}  // namespace nbrmm::waiting_frees
