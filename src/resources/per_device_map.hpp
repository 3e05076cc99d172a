// librmm's per-device resource map (rmm/mr/per_device_resource.hpp), read and written
// only through these functions. The map is the one record of each device's current
// resource: Python and C++ (nbrmm's own hooks, other extensions) see the same entries.
//
// None of these functions touches Python, so they run on any thread with or without the
// GIL. A copy of an entry (device_resource) shares the entry's state; destroying the last
// copy of an entry set from Python drops a Python reference, so a caller that may hold
// the last copy destroys it with the GIL held (or after handing it to one that does).
#pragma once

#include "core/common.hpp"

#include <functional>
#include <vector>

namespace nbrmm::device_map {

/// A copy of `device`'s entry; librmm's initial resource (a cuda_memory_resource) is
/// entered first when the device has none yet, as librmm's own getters do.
device_resource get(int device);

/// Replaces `device`'s entry with `entry` and returns the previous one (librmm's initial
/// resource when there was none).
device_resource exchange(int device, device_resource entry);

/// Whether `device` has an entry.
bool contains(int device);

/// The devices that have an entry, in increasing order.
std::vector<int> devices();

/// Calls `visit(device, entry)` for every entry, holding the map's lock: `visit` may
/// replace the entry (moving the old one out) but must not call back into the map.
void for_each(std::function<void(int device, device_resource& entry)> const& visit);

/// librmm's initial resource (what an untouched device serves from).
device_resource initial();

}  // namespace nbrmm::device_map
