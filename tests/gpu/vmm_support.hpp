// SPDX-License-Identifier: Apache-2.0
// What the GPU VMM suites share: why they skip on a machine without a GPU or without the driver's
// virtual memory management.
#pragma once

#include <exception>
#include <string>

#include "ddo/transport/vmm.hpp"
#include "gpu_support.hpp"

namespace ddo_test {

/// Empty when a GPU with CUDA VMM support is present; otherwise why the VMM cases skip.
inline std::string vmm_skip_reason() {
  std::string r = gpu_skip_reason();
  if (!r.empty()) return r;
  try {
    ddo::detail::cuda_vmm_driver probe(0);
  } catch (const std::exception& e) {
    return std::string("no usable CUDA VMM: ") + e.what();
  }
  return {};
}

}  // namespace ddo_test
