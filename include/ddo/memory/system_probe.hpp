// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Probes of the host: available RAM (MemAvailable and the cgroup v2/v1 memory limit) and
/// WSL detection. The file paths are injectable so tests run on prepared files.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ddo/core/linkage.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Where the probes read from. The defaults are the real kernel interfaces.
struct system_paths {
  std::string meminfo = "/proc/meminfo";               ///< MemAvailable / MemTotal
  std::string self_cgroup = "/proc/self/cgroup";       ///< this process's cgroup paths
  std::string cgroup_root = "/sys/fs/cgroup";          ///< cgroup mount (v2 unified or v1 root)
  std::string proc_version = "/proc/version";          ///< kernel build string
  std::string osrelease = "/proc/sys/kernel/osrelease";  ///< kernel release
};

namespace detail {

/// The text of @p path; nullopt when it cannot be read.
[[nodiscard]] DDO_INLINE std::optional<std::string> read_text_file(const std::string& path);

/// The unsigned integer a file holds ("max" or anything else: nullopt).
[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> read_uint_file(const std::string& path);

/// "MemAvailable:   123456 kB" → bytes.
[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> meminfo_value(const std::string& text,
                                                                    std::string_view key);

/// The headroom a cgroup leaves: limit minus usage, for the cgroup and each ancestor (the
/// tightest wins). nullopt when no level has a limit.
[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> cgroup_headroom(
    const std::string& dir_root, std::string relative, std::string_view limit_file,
    std::string_view usage_file, std::uint64_t unlimited_above);

}  // namespace detail

/// @brief The cgroup memory headroom of this process (limit minus usage; cgroup v2 memory.max /
/// memory.current, else v1 memory.limit_in_bytes / memory.usage_in_bytes), the tightest of the
/// process's cgroup and its ancestors; nullopt when no limit applies.
[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> cgroup_memory_headroom_bytes(
    const system_paths& paths = {});

/// @brief Available RAM in bytes: the smaller of /proc/meminfo MemAvailable and the cgroup
/// headroom; nullopt when neither can be read.
[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> available_ram_bytes(
    const system_paths& paths = {});

/// @brief Whether this process runs under WSL: /proc/version or /proc/sys/kernel/osrelease
/// mentions "microsoft" or "WSL" (any case).
[[nodiscard]] DDO_INLINE bool running_on_wsl(const system_paths& paths = {});

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/memory/detail/system_probe_impl.hpp"
#endif
