// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::nvtx_range, ddo's one NVTX guard (the runtime's acquire/release/setup ranges use
/// it; programs may too, for their own ranges). NVTX costs nothing unless asked for: only a translation unit
/// compiled with DDO_ENABLE_NVTX defined (and the toolkit's nvtx3 headers present) includes
/// nvtx3 and pushes ranges; everywhere else the guard is an empty object and no NVTX header is
/// included. ddo's own programs (examples/, bench/) opt in through their compile arguments;
/// an engine opts in the same way. runtime_options::nvtx still decides at run time.
///
/// Define DDO_ENABLE_NVTX the same way in every translation unit of a program (like NDEBUG):
/// the guard's layout does not change with it, but its behaviour does.

#if defined(DDO_ENABLE_NVTX) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define DDO_HAS_NVTX 1
#else
#define DDO_HAS_NVTX 0
#endif

namespace ddo {
inline namespace v0 {

/// @brief Whether this translation unit pushes NVTX ranges at all.
inline constexpr bool nvtx_compiled_in = DDO_HAS_NVTX != 0;

/// @brief Pushes an NVTX range named @p name for its lifetime when @p on and NVTX is compiled
/// in (DDO_ENABLE_NVTX); otherwise does nothing. @p name must outlive the constructor call.
class nvtx_range {
 public:
  nvtx_range(bool on, const char* name) noexcept : on_(on && nvtx_compiled_in) {
#if DDO_HAS_NVTX
    if (on_) nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~nvtx_range() {
#if DDO_HAS_NVTX
    if (on_) nvtxRangePop();
#endif
  }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;

 private:
  [[maybe_unused]] bool on_;  // read only where NVTX is compiled in
};

}  // namespace v0
}  // namespace ddo
