// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of the host probes (memory/system_probe.hpp).

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

// Part of ddo/memory/system_probe.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {

namespace detail {

DDO_INLINE std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

DDO_INLINE std::optional<std::uint64_t> read_uint_file(const std::string& path) {
  const auto text = read_text_file(path);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string token;
  in >> token;
  if (token.empty() || token == "max") return std::nullopt;
  std::uint64_t value = 0;
  for (char c : token) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

DDO_INLINE std::optional<std::uint64_t> meminfo_value(const std::string& text,
                                                      std::string_view key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0 || line.size() <= key.size() || line[key.size()] != ':') continue;
    std::istringstream fields(line.substr(key.size() + 1));
    std::uint64_t value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

DDO_INLINE std::optional<std::uint64_t> cgroup_headroom(const std::string& dir_root,
                                                        std::string relative,
                                                        std::string_view limit_file,
                                                        std::string_view usage_file,
                                                        std::uint64_t unlimited_above) {
  std::optional<std::uint64_t> best;
  while (true) {
    const std::string dir = dir_root + (relative == "/" ? "" : relative);
    const auto limit = read_uint_file(dir + "/" + std::string(limit_file));
    if (limit && *limit < unlimited_above) {
      const std::uint64_t usage = read_uint_file(dir + "/" + std::string(usage_file)).value_or(0);
      const std::uint64_t headroom = *limit > usage ? *limit - usage : 0;
      best = best ? std::min(*best, headroom) : headroom;
    }
    if (relative.empty() || relative == "/") break;
    const auto slash = relative.find_last_of('/');
    relative = slash == 0 || slash == std::string::npos ? "/" : relative.substr(0, slash);
  }
  return best;
}

}  // namespace detail

[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> cgroup_memory_headroom_bytes(
    const system_paths& paths) {
  const auto cgroups = detail::read_text_file(paths.self_cgroup);
  if (!cgroups) return std::nullopt;
  // v1 "no limit" is a page-rounded INT64_MAX; anything past 2^60 bytes is treated as unlimited.
  constexpr std::uint64_t unlimited_above = 1ull << 60;
  std::istringstream in(*cgroups);
  std::string line;
  std::optional<std::uint64_t> result;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::optional<std::uint64_t> headroom;
    if (controllers.empty()) {  // v2 unified hierarchy: "0::/path"
      headroom = detail::cgroup_headroom(paths.cgroup_root, path, "memory.max", "memory.current",
                                         unlimited_above);
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      headroom =
          detail::cgroup_headroom(paths.cgroup_root + "/memory", path, "memory.limit_in_bytes",
                                  "memory.usage_in_bytes", unlimited_above);
    }
    if (headroom) result = result ? std::min(*result, *headroom) : *headroom;
  }
  return result;
}

[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> available_ram_bytes(
    const system_paths& paths) {
  std::optional<std::uint64_t> available;
  if (const auto meminfo = detail::read_text_file(paths.meminfo))
    available = detail::meminfo_value(*meminfo, "MemAvailable");
  const auto cgroup = cgroup_memory_headroom_bytes(paths);
  if (available && cgroup) return std::min(*available, *cgroup);
  return available ? available : cgroup;
}

[[nodiscard]] DDO_INLINE bool running_on_wsl(const system_paths& paths) {
  for (const std::string* path : {&paths.proc_version, &paths.osrelease}) {
    auto text = detail::read_text_file(*path);
    if (!text) continue;
    for (char& c : *text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (text->find("microsoft") != std::string::npos || text->find("wsl") != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace v0
}  // namespace ddo
