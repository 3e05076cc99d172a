// The one place that reads and writes librmm's per-device resource map (see the header).
#include "resources/per_device_map.hpp"

#include <rmm/mr/per_device_resource.hpp>

#include <algorithm>
#include <mutex>
#include <utility>

namespace nbrmm::device_map {

device_resource initial() { return device_resource{rmm::mr::detail::initial_resource()}; }

device_resource get(int device)
{
  std::lock_guard<std::mutex> lock{rmm::mr::detail::ref_map_lock()};
  auto& map = rmm::mr::detail::get_ref_map();
  auto it   = map.find(device);
  if (it == map.end()) { it = map.emplace(device, initial()).first; }
  return it->second;
}

device_resource exchange(int device, device_resource entry)
{
  return rmm::mr::set_per_device_resource(rmm::cuda_device_id{device}, std::move(entry));
}

bool contains(int device)
{
  std::lock_guard<std::mutex> lock{rmm::mr::detail::ref_map_lock()};
  return rmm::mr::detail::get_ref_map().count(device) != 0;
}

std::vector<int> devices()
{
  std::vector<int> ids;
  {
    std::lock_guard<std::mutex> lock{rmm::mr::detail::ref_map_lock()};
    for (auto const& entry : rmm::mr::detail::get_ref_map()) { ids.push_back(entry.first); }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

void for_each(std::function<void(int device, device_resource& entry)> const& visit)
{
  std::lock_guard<std::mutex> lock{rmm::mr::detail::ref_map_lock()};
  for (auto& [device, entry] : rmm::mr::detail::get_ref_map()) { visit(device, entry); }
}

}  // namespace nbrmm::device_map
