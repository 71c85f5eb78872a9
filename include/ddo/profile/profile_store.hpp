// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::profile_store: capacity profiles on disk, one `<name>.toml` file per workload under
/// `DDO_PROFILE_DIR` (default `~/.ddo/profiles`).
///
/// The files are a small TOML subset that ddo writes itself (`key = value`, quoted strings,
/// integers, booleans, `[[groups]]` tables), so the core reads them without toml++ and any TOML tool can read them.
/// Saves are atomic (write to a temporary file, then rename), so a run that crashes mid-save never
/// leaves a half profile for the next run to trust.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/profile/capacity_profile.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Expands a leading "~" or "~/" with $HOME (the reference's default `~/.ddo/profiles`).
[[nodiscard]] DDO_INLINE std::filesystem::path expand_home(std::string_view path);

/// @brief A directory of capacity profiles.
class profile_store {
 public:
  /// @param directory where profiles live; "~" is expanded. Created on the first save.
  explicit profile_store(std::string_view directory) : directory_(expand_home(directory)) {}

  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }

  /// @brief The file that holds profile @p name. @throws config_error for an invalid name.
  [[nodiscard]] std::filesystem::path path_of(std::string_view name) const;

  /// @brief The stored profile called @p name, or nullopt when there is none.
  /// @throws format_error naming the file and key for a malformed file; io_error if unreadable.
  [[nodiscard]] std::optional<capacity_profile> find(std::string_view name) const;

  /// @brief The largest profile file read (a group's entry is about 200 bytes: room for 20,000
  /// groups; a format 1 profile is a few hundred bytes).
  static constexpr std::uint64_t max_profile_bytes = 4 * 1024 * 1024;

  /// @brief Writes @p profile atomically, creating the directory when missing.
  /// @throws io_error naming the path on failure (nothing half-written is left behind).
  void save(const capacity_profile& profile) const;

  /// @brief The text of a profile file, in the profile's format (1 to 3: the predecessors'
  /// layouts, so that a profile read from one formats back to the same text).
  [[nodiscard]] static std::string format(const capacity_profile& p);

  /// @brief Parses a profile file's text: format 4 (a `format = 4` line before any group, the
  /// keys of format 1 and the calibration's, then one `[[groups]]` table per execution group),
  /// format 3 (the same with `format = 3` and groups without the sustained-compute keys, read as
  /// 0: not measured), format 2 (nor the lead-in keys, read as 0), or format 1 (no `format`
  /// line, exactly the budget keys). Every key of the file's format must be present exactly
  /// once.
  /// @throws format_error naming @p file and the key; a profile of a newer format is refused
  /// with the formats this ddo reads.
  [[nodiscard]] static capacity_profile parse(std::string_view text, const std::string& file,
                                              std::string_view expected_name);

 private:
  static std::string_view trim(std::string_view s);
  static std::string escape(std::string_view s);
  static std::string parse_string(std::string_view v, const std::string& file,
                                  const std::string& key);
  static std::uint64_t parse_u64(std::string_view v, const std::string& file,
                                 const std::string& key);

  std::filesystem::path directory_;
};

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/profile/detail/profile_store_impl.hpp"
#endif
