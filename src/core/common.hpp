// What every nbrmm source file needs: the precompiled headers, the `nb` alias and librmm's
// default alignment. Each concern has its own header beside this one (gil.hpp, py_owned.hpp,
// errors.hpp, args.hpp, device.hpp, stream.hpp, resource.hpp, deferred_frees.hpp, ...).
#pragma once

#include "pch.hpp"

#include <nbrmm/nbrmm.hpp>  // the public C++ API (capsule protocol)

#include <cstddef>

namespace nb = nanobind;

namespace nbrmm {

/// librmm's default allocation alignment (CUDA's 256 bytes); every librmm resource returns
/// pointers aligned to at least this.
inline constexpr std::size_t default_alignment = rmm::CUDA_ALLOCATION_ALIGNMENT;

}  // namespace nbrmm
