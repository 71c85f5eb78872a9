// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of the capacity-profile store (profile/profile_store.hpp): compiled in
/// every TU that includes it when ddo is header-only, once otherwise (core/linkage.hpp).

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/regular_file.hpp"
#include "ddo/core/text.hpp"
// Part of ddo/profile/profile_store.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {

DDO_INLINE std::filesystem::path expand_home(std::string_view path) {
  if (path == "~" || path.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0')
      throw config_error(origin::env, "DDO_PROFILE_DIR",
                         "the profile directory '" + std::string(path) +
                             "' starts with '~' but HOME is not set: set DDO_PROFILE_DIR to an "
                             "absolute path");
    return std::filesystem::path(home) / std::string(path.substr(path.size() > 1 ? 2 : 1));
  }
  return std::filesystem::path(std::string(path));
}

DDO_INLINE std::filesystem::path profile_store::path_of(std::string_view name) const {
  validate_profile_name(name);
  return directory_ / (std::string(name) + ".toml");
}

DDO_INLINE std::optional<capacity_profile> profile_store::find(std::string_view name) const {
  const auto path = path_of(name);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  // A regular file of a profile's size only: a FIFO or device planted there is refused
  // without blocking, and a huge file before it is read.
  return parse(read_regular_file(path.string(), max_profile_bytes, "capacity profile"),
               path.string(), name);
}

DDO_INLINE void profile_store::save(const capacity_profile& profile) const {
  const auto path = path_of(profile.name);
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec)
    throw io_error(
        directory_.string(), ec.value(),
        "cannot create the profile directory " + directory_.string() + ": " + ec.message());
  // Written aside and renamed (ddo/core/atomic_file.hpp); temporaries left by a killed
  // process are removed first.
  (void)remove_stale_temporaries(directory_);
  write_file_atomically(path, format(profile));
}

DDO_INLINE std::string profile_store::format(const capacity_profile& p) {
  std::ostringstream out;
  if (p.format == 1) {
    out << "# ddo capacity profile: written by a zero-resident calibration run.\n";
  } else {
    out << "# ddo capacity profile (format " << p.format
        << "): written by a zero-resident calibration run.\n"
        << "format = " << p.format << "\n";
  }
  out << "name = \"" << p.name << "\"\n"
      << "device_name = \"" << escape(sanitize_utf8(p.device_name)) << "\"\n"
      << "total_vram_bytes = " << p.total_vram_bytes << "\n"
      << "model_bytes = " << p.model_bytes << "\n"
      << "peak_in_use_bytes = " << p.peak_in_use_bytes << "\n"
      << "headroom_bytes = " << p.headroom_bytes << "\n"
      << "recommended_resident_budget_bytes = " << p.recommended_resident_budget_bytes << "\n"
      << "full_pin = " << (p.full_pin ? "true" : "false") << "\n";
  if (p.format == 1) return out.str();
  out << "model_fingerprint = \"" << escape(sanitize_utf8(p.model_fingerprint)) << "\"\n"
      << "transport = \"" << escape(sanitize_utf8(p.transport)) << "\"\n"
      << "min_free_vram_bytes = " << p.min_free_vram_bytes << "\n"
      << "slot_count = " << p.slot_count << "\n"
      << "prefetch_depth = " << p.prefetch_depth << "\n"
      << "tokens_low = " << p.tokens_low << "\n"
      << "tokens_high = " << p.tokens_high << "\n";
  for (const auto& g : p.groups) {
    out << "\n[[groups]]\n"
        << "name = \"" << escape(sanitize_utf8(g.name)) << "\"\n"
        << "pinned_bytes = " << g.pinned_bytes << "\n"
        << "staged_bytes = " << g.staged_bytes << "\n"
        << "file_bytes = " << g.file_bytes << "\n"
        << "transfer_ns = " << g.transfer_ns << "\n"
        << "compute_ns_low = " << g.compute_ns_low << "\n"
        << "compute_ns_high = " << g.compute_ns_high << "\n";
    if (p.format >= 3)
      out << "lead_in_ns_low = " << g.lead_in_ns_low << "\n"
          << "lead_in_ns_high = " << g.lead_in_ns_high << "\n";
    if (p.format >= 4)
      out << "sustained_compute_ns_low = " << g.sustained_compute_ns_low << "\n"
          << "sustained_compute_ns_high = " << g.sustained_compute_ns_high << "\n";
  }
  return out.str();
}

DDO_INLINE capacity_profile profile_store::parse(std::string_view text, const std::string& file,
                                                 std::string_view expected_name) {
  // Each key beside the member it fills: a count (bytes, ns) or text; neither for full_pin and
  // format, which are read apart. Top keys in file order; the first v1_keys are format 1's.
  using P = capacity_profile;
  struct top_key {
    std::string_view name;
    std::string P::*text = nullptr;
    std::uint64_t P::*number = nullptr;
  };
  static constexpr top_key top_keys[] = {
      {"name", &P::name},
      {"device_name", &P::device_name},
      {"total_vram_bytes", nullptr, &P::total_vram_bytes},
      {"model_bytes", nullptr, &P::model_bytes},
      {"peak_in_use_bytes", nullptr, &P::peak_in_use_bytes},
      {"headroom_bytes", nullptr, &P::headroom_bytes},
      {"recommended_resident_budget_bytes", nullptr, &P::recommended_resident_budget_bytes},
      {"full_pin"},
      {"format"},
      {"model_fingerprint", &P::model_fingerprint},
      {"transport", &P::transport},
      {"min_free_vram_bytes", nullptr, &P::min_free_vram_bytes},
      {"slot_count", nullptr, &P::slot_count},
      {"prefetch_depth", nullptr, &P::prefetch_depth},
      {"tokens_low", nullptr, &P::tokens_low},
      {"tokens_high", nullptr, &P::tokens_high}};
  constexpr std::size_t v1_keys = 8;
  // A group's keys; its name is its only text (number null).
  using G = group_profile;
  struct group_key {
    std::string_view name;
    std::uint64_t G::*number = nullptr;
  };
  static constexpr group_key group_keys[] = {
      {"name"},
      {"pinned_bytes", &G::pinned_bytes},
      {"staged_bytes", &G::staged_bytes},
      {"file_bytes", &G::file_bytes},
      {"transfer_ns", &G::transfer_ns},
      {"compute_ns_low", &G::compute_ns_low},
      {"compute_ns_high", &G::compute_ns_high},
      {"lead_in_ns_low", &G::lead_in_ns_low},
      {"lead_in_ns_high", &G::lead_in_ns_high},
      {"sustained_compute_ns_low", &G::sustained_compute_ns_low},
      {"sustained_compute_ns_high", &G::sustained_compute_ns_high}};
  const auto named = [](const std::string& key) {
    return [&key](const auto& k) { return k.name == key; };
  };
  // How many of group_keys each format's groups have (format 2: 7, 3: 9, 4: 11).
  const auto group_keys_of = [](int format) -> std::size_t {
    return 7 + 2 * static_cast<std::size_t>(format - 2);
  };
  static_assert(std::size(group_keys) == 7 + 2 * (capacity_profile_format - 2));
  constexpr std::uint32_t all_top = (1u << std::size(top_keys)) - 1;
  capacity_profile p;
  const auto all_group = [&] { return (1u << group_keys_of(std::max(p.format, 2))) - 1; };
  std::uint32_t seen = 0, group_seen = 0;
  bool in_group = false;
  std::size_t line_number = 0;
  const auto finish_group = [&] {
    if (in_group && group_seen != all_group())
      throw format_error(file, "groups",
                         file + ": group " + std::to_string(p.groups.size()) + " ('" +
                             sanitize_utf8(p.groups.back().name.substr(0, 200)) +
                             "') is missing a key; each [[groups]] needs " +
                             "name, pinned_bytes, staged_bytes, file_bytes, "
                             "transfer_ns, compute_ns_low, compute_ns_high" +
                             (p.format >= 3 ? ", lead_in_ns_low, lead_in_ns_high" : "") +
                             (p.format >= 4 ? ", sustained_compute_ns_low, "
                                              "sustained_compute_ns_high"
                                            : ""));
    group_seen = 0;
  };
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line_number;
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[') {
      if (line != "[[groups]]")
        throw format_error(file, "",
                           file + ":" + std::to_string(line_number) + ": unknown table '" +
                               sanitize_utf8(line.substr(0, 200)) +
                               "' (a capacity profile has only [[groups]])");
      finish_group();
      in_group = true;
      p.groups.emplace_back();
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string_view::npos)
      throw format_error(file, "",
                         file + ":" + std::to_string(line_number) +
                             ": expected 'key = value', got '" +
                             sanitize_utf8(line.substr(0, 200)) + "'");
    const std::string key = sanitize_utf8(trim(line.substr(0, eq)));
    const std::string_view value = trim(line.substr(eq + 1));
    if (in_group) {
      const auto at = std::find_if(std::begin(group_keys), std::end(group_keys), named(key));
      if (at == std::end(group_keys))
        throw format_error(file, key, file + ": unknown key '" + key + "' in a [[groups]] table");
      const auto index = static_cast<std::size_t>(at - std::begin(group_keys));
      if (index >= group_keys_of(std::max(p.format, 2))) {
        int since = 3;
        while (index >= group_keys_of(since)) ++since;
        throw format_error(file, key,
                           file + ": key '" + key + "' belongs to format " + std::to_string(since) +
                               " and later, but the file says format " + std::to_string(p.format) +
                               " (or has no format line before its groups)");
      }
      const auto bit = 1u << index;
      if (group_seen & bit)
        throw format_error(file, key,
                           file + ": key '" + key + "' appears twice in group " +
                               std::to_string(p.groups.size() - 1));
      group_seen |= bit;
      auto& g = p.groups.back();
      if (at->number == nullptr)
        g.name = parse_string(value, file, key);
      else
        g.*at->number = parse_u64(value, file, key);
      continue;
    }
    const auto at = std::find_if(std::begin(top_keys), std::end(top_keys), named(key));
    if (at == std::end(top_keys))
      throw format_error(file, key, file + ": unknown key '" + key + "' in a capacity profile");
    const auto bit = 1u << (at - std::begin(top_keys));
    if (seen & bit) throw format_error(file, key, file + ": key '" + key + "' appears twice");
    seen |= bit;
    if (at->text != nullptr) {
      p.*at->text = parse_string(value, file, key);
    } else if (at->number != nullptr) {
      p.*at->number = parse_u64(value, file, key);
    } else if (key == "full_pin") {
      if (value != "true" && value != "false")
        throw format_error(file, key,
                           file + ": full_pin must be true or false, got '" +
                               sanitize_utf8(value.substr(0, 200)) + "'");
      p.full_pin = value == "true";
    } else {  // format
      const std::uint64_t f = parse_u64(value, file, key);
      if (f < 2 || f > static_cast<std::uint64_t>(capacity_profile_format))
        throw format_error(
            file, key,
            file + ": capacity profile format " + sanitize_utf8(value.substr(0, 20)) +
                " is not one this ddo reads (2 to " + std::to_string(capacity_profile_format) +
                ", or 1 without a format line): calibrate again "
                "with build_profile");
      p.format = static_cast<int>(f);
    }
  }
  finish_group();
  const bool v2 = (seen & (1u << 8)) != 0;
  if (!v2) {
    // The predecessor's layout: exactly its keys, no groups.
    p.format = 1;
    for (std::size_t k = v1_keys; k < std::size(top_keys); ++k)
      if (seen & (1u << k))
        throw format_error(
            file, std::string(top_keys[k].name),
            file + ": key '" + std::string(top_keys[k].name) +
                "' belongs to formats 2 and later, but the file has no 'format' line");
    if (!p.groups.empty())
      throw format_error(file, "groups",
                         file +
                             ": [[groups]] belong to formats 2 and later, but the file has "
                             "no 'format' line");
    if (seen != (1u << v1_keys) - 1)
      throw format_error(file, "", file + ": incomplete capacity profile (a key is missing)");
  } else if (seen != all_top) {
    std::string missing;
    for (std::size_t k = 0; k < std::size(top_keys); ++k)
      if (!(seen & (1u << k)))
        missing += (missing.empty() ? "" : ", ") + std::string(top_keys[k].name);
    throw format_error(file, "", file + ": incomplete capacity profile (missing: " + missing + ")");
  }
  if (p.name != expected_name)
    throw format_error(file, "name",
                       file + ": the profile inside is named '" + sanitize_utf8(p.name) +
                           "', expected '" + std::string(expected_name) + "'");
  // Text values are one line of UTF-8 without control characters: what save() writes, so
  // that what is read formats back to the same file.
  const auto check_text = [&](const std::string& value, const std::string& key) {
    if (!is_valid_utf8(value) || std::any_of(value.begin(), value.end(), [](char c) {
          return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        }))
      throw format_error(file, key,
                         file + ": " + key +
                             " must be UTF-8 text without control characters, got \"" +
                             sanitize_utf8(value.substr(0, 200)) + "\"");
  };
  check_text(p.name, "name");
  check_text(p.device_name, "device_name");
  check_text(p.model_fingerprint, "model_fingerprint");
  check_text(p.transport, "transport");
  std::unordered_set<std::string_view> names;
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    const auto& g = p.groups[i];
    check_text(g.name, "groups");
    if (g.name.empty())
      throw format_error(file, "groups",
                         file + ": group " + std::to_string(i) + " has an empty name");
    if (!names.insert(g.name).second)
      throw format_error(
          file, "groups",
          file + ": group '" + sanitize_utf8(g.name.substr(0, 200)) + "' appears twice");
    if (g.pinned_bytes > UINT64_MAX - g.staged_bytes ||
        g.pinned_bytes + g.staged_bytes > UINT64_MAX - g.file_bytes)
      throw format_error(file, "groups",
                         file + ": group '" + sanitize_utf8(g.name.substr(0, 200)) +
                             "' has more bytes than 64 bits count");
  }
  if (!p.groups.empty() && (p.tokens_low == 0 || p.tokens_low > p.tokens_high))
    throw format_error(file, "tokens_low",
                       file +
                           ": a profile with group timings needs 0 < tokens_low <= tokens_high, "
                           "got " +
                           std::to_string(p.tokens_low) + " and " + std::to_string(p.tokens_high));
  return p;
}

DDO_INLINE std::string_view profile_store::trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

DDO_INLINE std::string profile_store::escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n' || c == '\r') continue;
    out += c;
  }
  return out;
}

DDO_INLINE std::string profile_store::parse_string(std::string_view v, const std::string& file,
                                                   const std::string& key) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"')
    throw format_error(file, key, file + ": " + key + " must be a quoted string");
  std::string out;
  for (std::size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == '\\' && i + 2 < v.size()) ++i;
    out += v[i];
  }
  return out;
}

DDO_INLINE std::uint64_t profile_store::parse_u64(std::string_view v, const std::string& file,
                                                  const std::string& key) {
  // Times and sizes have the bounds every stated time and size has (core/units.hpp), so that
  // the planner's sums and conversions of them cannot wrap or overflow: a transfer_ns of
  // 2^64 - 1 was accepted and then failed the planner as "a negative or non-finite time",
  // naming neither the file nor the key.
  const bool time = key.ends_with("_ns") || key.find("_ns_") != std::string::npos;
  const bool size = key.ends_with("_bytes");
  const std::uint64_t most = time ? max_stated_ns : size ? max_stated_bytes : UINT64_MAX;
  const std::string what =
      time
          ? "a whole number of nanoseconds from 0 to " + std::to_string(most) + " (about 2.8 hours)"
      : size ? "a whole number of bytes from 0 to " + std::to_string(most) + " (16 PiB)"
             : "a whole number from 0 to " + std::to_string(most);
  const auto refuse = [&] {
    throw format_error(
        file, key,
        file + ": " + key + " must be " + what + ", got '" + sanitize_utf8(v.substr(0, 200)) + "'");
  };
  std::uint64_t out = 0;
  if (v.empty()) throw format_error(file, key, file + ": " + key + " has no value");
  for (char c : v) {
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (c < '0' || c > '9' || out > (UINT64_MAX - digit) / 10) refuse();
    out = out * 10 + digit;
  }
  if (out > most) refuse();
  return out;
}

}  // namespace v0
}  // namespace ddo
