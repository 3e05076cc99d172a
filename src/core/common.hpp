// What every nbrmm source file needs: the precompiled headers, the `nb` alias and librmm's
// default alignment. Each concern has its own header, in the folder of its layer (core/,
// streams/, resources/, buffer/; see docs/design.md).
#pragma once

#include "core/pch.hpp"

#include <nbrmm/nbrmm.hpp>  // the public C++ API (capsule protocol)

#include <cstddef>

namespace nb = nanobind;

namespace nbrmm {

/// librmm's default allocation alignment (CUDA's 256 bytes); every librmm resource returns
/// pointers aligned to at least this.
inline constexpr std::size_t default_alignment = rmm::CUDA_ALLOCATION_ALIGNMENT;

}  // namespace nbrmm
