// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::profile_store: capacity profiles on disk, one `<name>.toml` file per workload under
/// `DDO_PROFILE_DIR` (default `~/.ddo/profiles`).
///
/// The files are a small TOML subset that ddo writes itself (`key = value`, quoted strings,
/// integers, booleans), so the core reads them without toml++ and any TOML tool can read them.
/// Saves are atomic (write to a temporary file, then rename), so a run that crashes mid-save never
/// leaves a half profile for the next run to trust.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/regular_file.hpp"
#include "ddo/core/text.hpp"
#include "ddo/profile/capacity_profile.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Expands a leading "~" or "~/" with $HOME (the reference's default `~/.ddo/profiles`).
[[nodiscard]] inline std::filesystem::path expand_home(std::string_view path) {
  if (path == "~" || path.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0')
      throw config_error("env", "DDO_PROFILE_DIR",
                         "the profile directory '" + std::string(path) +
                             "' starts with '~' but HOME is not set: set DDO_PROFILE_DIR to an "
                             "absolute path");
    return std::filesystem::path(home) / std::string(path.substr(path.size() > 1 ? 2 : 1));
  }
  return std::filesystem::path(std::string(path));
}

/// @brief A directory of capacity profiles.
class profile_store {
 public:
  /// @param directory where profiles live; "~" is expanded. Created on the first save.
  explicit profile_store(std::string_view directory) : directory_(expand_home(directory)) {}

  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }

  /// @brief The file that holds profile @p name. @throws config_error for an invalid name.
  [[nodiscard]] std::filesystem::path path_of(std::string_view name) const {
    validate_profile_name(name);
    return directory_ / (std::string(name) + ".toml");
  }

  /// @brief The stored profile called @p name, or nullopt when there is none.
  /// @throws format_error naming the file and key for a malformed file; io_error if unreadable.
  [[nodiscard]] std::optional<capacity_profile> find(std::string_view name) const {
    const auto path = path_of(name);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    // A regular file of a profile's size only: a FIFO or device planted there is refused
    // without blocking, and a huge file before it is read.
    return parse(read_regular_file(path.string(), max_profile_bytes, "capacity profile"),
                 path.string(), name);
  }

  /// @brief The largest profile file read (a profile is a few hundred bytes).
  static constexpr std::uint64_t max_profile_bytes = 64 * 1024;

  /// @brief Writes @p profile atomically, creating the directory when missing.
  /// @throws io_error naming the path on failure (nothing half-written is left behind).
  void save(const capacity_profile& profile) const {
    const auto path = path_of(profile.name);
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec)
      throw io_error(directory_.string(), ec.value(),
                     "cannot create the profile directory " + directory_.string() + ": " +
                         ec.message());
    // Written aside and renamed (ddo/core/atomic_file.hpp); temporaries left by a killed
    // process are removed first.
    (void)remove_stale_temporaries(directory_);
    write_file_atomically(path, format(profile));
  }

  /// @brief The text of a profile file.
  [[nodiscard]] static std::string format(const capacity_profile& p) {
    std::ostringstream out;
    out << "# ddo capacity profile: written by a zero-resident calibration run.\n"
        << "name = \"" << p.name << "\"\n"
        << "device_name = \"" << escape(sanitize_utf8(p.device_name)) << "\"\n"
        << "total_vram_bytes = " << p.total_vram_bytes << "\n"
        << "model_bytes = " << p.model_bytes << "\n"
        << "peak_in_use_bytes = " << p.peak_in_use_bytes << "\n"
        << "headroom_bytes = " << p.headroom_bytes << "\n"
        << "recommended_resident_budget_bytes = " << p.recommended_resident_budget_bytes << "\n"
        << "full_pin = " << (p.full_pin ? "true" : "false") << "\n";
    return out.str();
  }

  /// @brief Parses a profile file's text. Every key must be present exactly once.
  /// @throws format_error naming @p file and the key.
  [[nodiscard]] static capacity_profile parse(std::string_view text, const std::string& file,
                                              std::string_view expected_name) {
    capacity_profile p;
    unsigned seen = 0;
    std::size_t line_number = 0;
    while (!text.empty()) {
      const auto end = text.find('\n');
      std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
      ++line_number;
      line = trim(line);
      if (line.empty() || line.front() == '#') continue;
      const auto eq = line.find('=');
      if (eq == std::string_view::npos)
        throw format_error(file, "", file + ":" + std::to_string(line_number) +
                                         ": expected 'key = value', got '" + sanitize_utf8(line.substr(0, 200)) + "'");
      const std::string key = sanitize_utf8(trim(line.substr(0, eq)));
      const std::string_view value = trim(line.substr(eq + 1));
      const auto mark = [&](unsigned bit) {
        if (seen & bit) throw format_error(file, key, file + ": key '" + key + "' appears twice");
        seen |= bit;
      };
      if (key == "name") mark(1), p.name = parse_string(value, file, key);
      else if (key == "device_name") mark(2), p.device_name = parse_string(value, file, key);
      else if (key == "total_vram_bytes") mark(4), p.total_vram_bytes = parse_u64(value, file, key);
      else if (key == "model_bytes") mark(8), p.model_bytes = parse_u64(value, file, key);
      else if (key == "peak_in_use_bytes") mark(16), p.peak_in_use_bytes = parse_u64(value, file, key);
      else if (key == "headroom_bytes") mark(32), p.headroom_bytes = parse_u64(value, file, key);
      else if (key == "recommended_resident_budget_bytes")
        mark(64), p.recommended_resident_budget_bytes = parse_u64(value, file, key);
      else if (key == "full_pin") {
        mark(128);
        if (value != "true" && value != "false")
          throw format_error(file, key, file + ": full_pin must be true or false, got '" +
                                            sanitize_utf8(value.substr(0, 200)) + "'");
        p.full_pin = value == "true";
      } else {
        throw format_error(file, key, file + ": unknown key '" + key + "' in a capacity profile");
      }
    }
    if (seen != 255u)
      throw format_error(file, "", file + ": incomplete capacity profile (a key is missing)");
    if (p.name != expected_name)
      throw format_error(file, "name", file + ": the profile inside is named '" + sanitize_utf8(p.name) +
                                           "', expected '" + std::string(expected_name) + "'");
    // Text values are one line of UTF-8 without control characters: what save() writes, so
    // that what is read formats back to the same file.
    for (const std::string* text : {&p.name, &p.device_name})
      if (!is_valid_utf8(*text) ||
          std::any_of(text->begin(), text->end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
          }))
        throw format_error(file, text == &p.name ? "name" : "device_name",
                           file + ": " + (text == &p.name ? "name" : "device_name") +
                               " must be UTF-8 text without control characters, got \"" +
                               sanitize_utf8(text->substr(0, 200)) + "\"");
    return p;
  }

 private:
  static std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
  }
  static std::string escape(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n' || c == '\r') continue;
      out += c;
    }
    return out;
  }
  static std::string parse_string(std::string_view v, const std::string& file, const std::string& key) {
    if (v.size() < 2 || v.front() != '"' || v.back() != '"')
      throw format_error(file, key, file + ": " + key + " must be a quoted string");
    std::string out;
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
      if (v[i] == '\\' && i + 2 < v.size()) ++i;
      out += v[i];
    }
    return out;
  }
  static std::uint64_t parse_u64(std::string_view v, const std::string& file, const std::string& key) {
    std::uint64_t out = 0;
    if (v.empty()) throw format_error(file, key, file + ": " + key + " has no value");
    for (char c : v) {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (c < '0' || c > '9' || out > (UINT64_MAX - digit) / 10)
        throw format_error(file, key, file + ": " + key + " must be a non-negative integer of bytes, got '" +
                                          sanitize_utf8(v.substr(0, 200)) + "'");
      out = out * 10 + digit;
    }
    return out;
  }

  std::filesystem::path directory_;
};

}  // namespace v0
}  // namespace ddo
