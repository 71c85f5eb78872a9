// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::profile_store: capacity profiles on disk, one `<name>.json` file per workload under
/// `DDO_PROFILE_DIR` (default `~/.ddo/profiles`).
///
/// The files are JSON, written by ddo's JSON writer and read by its JSON reader (core/), so the
/// core reads them without a parser of their own and any JSON tool can read them. A `<name>.toml`
/// profile of earlier ddo versions is refused with a message naming it and what to do.
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
namespace detail {
class json_value;
}  // namespace detail

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

  /// @brief The text of a profile file: one JSON object, a member per line, with `format`
  /// (capacity_profile_format), the budget and calibration keys, and `groups`, an array of one
  /// object per execution group.
  [[nodiscard]] static std::string format(const capacity_profile& p);

  /// @brief Parses a profile file's text (format()'s layout; any JSON spacing). Every key must be
  /// present exactly once, none unknown; times and sizes within the stated bounds.
  /// @throws format_error naming @p file and the key; a profile of another format is refused
  /// with the format this ddo reads.
  [[nodiscard]] static capacity_profile parse(std::string_view text, const std::string& file,
                                              std::string_view expected_name);

 private:
  static std::string text_of(const detail::json_value& v, const std::string& file,
                             const std::string& key);
  static std::uint64_t number_of(const detail::json_value& v, const std::string& file,
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
