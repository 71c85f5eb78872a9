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
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/detail/json.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/json_writer.hpp"
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
  return directory_ / (std::string(name) + ".json");
}

DDO_INLINE std::optional<capacity_profile> profile_store::find(std::string_view name) const {
  const auto path = path_of(name);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    // Profiles were TOML files (<name>.toml) before they were JSON: such a file is refused,
    // not ignored, so that a run does not silently plan without the profile it was given.
    const auto old = std::filesystem::path(path).replace_extension(".toml");
    if (std::filesystem::exists(old, ec))
      throw format_error(old.string(), "",
                         old.string() + ": a capacity profile in the TOML layout of earlier ddo " +
                             "versions, which this ddo no longer reads (profiles are JSON: " +
                             path.string() + "): delete it and calibrate again (ddo-run " +
                             "--profile " + std::string(name) + " --calibrate, or build_profile)");
    return std::nullopt;
  }
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

namespace detail {

/// A profile's keys beside the members they fill, in file order: text, a count (bytes, ns), or
/// neither (format, full_pin and groups, read apart). A group's name is its only text.
struct profile_key {
  std::string_view name;
  std::string capacity_profile::*text = nullptr;
  std::uint64_t capacity_profile::*number = nullptr;
};
inline constexpr profile_key profile_keys[] = {
    {"format"},
    {"name", &capacity_profile::name},
    {"device_name", &capacity_profile::device_name},
    {"total_vram_bytes", nullptr, &capacity_profile::total_vram_bytes},
    {"model_bytes", nullptr, &capacity_profile::model_bytes},
    {"peak_in_use_bytes", nullptr, &capacity_profile::peak_in_use_bytes},
    {"headroom_bytes", nullptr, &capacity_profile::headroom_bytes},
    {"recommended_resident_budget_bytes", nullptr,
     &capacity_profile::recommended_resident_budget_bytes},
    {"full_pin"},
    {"model_fingerprint", &capacity_profile::model_fingerprint},
    {"transport", &capacity_profile::transport},
    {"min_free_vram_bytes", nullptr, &capacity_profile::min_free_vram_bytes},
    {"slot_count", nullptr, &capacity_profile::slot_count},
    {"prefetch_depth", nullptr, &capacity_profile::prefetch_depth},
    {"tokens_low", nullptr, &capacity_profile::tokens_low},
    {"tokens_high", nullptr, &capacity_profile::tokens_high},
    {"groups"}};
struct group_key {
  std::string_view name;
  std::uint64_t group_profile::*number = nullptr;
};
inline constexpr group_key group_keys[] = {
    {"name"},
    {"pinned_bytes", &group_profile::pinned_bytes},
    {"staged_bytes", &group_profile::staged_bytes},
    {"file_bytes", &group_profile::file_bytes},
    {"transfer_ns", &group_profile::transfer_ns},
    {"compute_ns_low", &group_profile::compute_ns_low},
    {"compute_ns_high", &group_profile::compute_ns_high},
    {"lead_in_ns_low", &group_profile::lead_in_ns_low},
    {"lead_in_ns_high", &group_profile::lead_in_ns_high},
    {"sustained_compute_ns_low", &group_profile::sustained_compute_ns_low},
    {"sustained_compute_ns_high", &group_profile::sustained_compute_ns_high}};

/// The first member of @p object that is none of @p keys, or nullptr.
template <class Key, std::size_t N>
[[nodiscard]] const std::string* unknown_key(const Key (&keys)[N], const json_value& object) {
  for (const auto& member : object.members())
    if (std::none_of(std::begin(keys), std::end(keys),
                     [&](const Key& k) { return k.name == member.first; }))
      return &member.first;
  return nullptr;
}

/// Every name of @p keys, comma separated, for the error message naming an unknown key.
template <class Key, std::size_t N>
[[nodiscard]] std::string key_list(const Key (&keys)[N]) {
  std::string list;
  for (const auto& k : keys) list += (list.empty() ? "" : ", ") + std::string(k.name);
  return list;
}

/// The names of @p keys an object lacks ("" when it has every one), for the error message.
template <class Key, std::size_t N>
[[nodiscard]] std::string missing_keys(const Key (&keys)[N], const json_value& object) {
  std::string missing;
  for (const auto& k : keys)
    if (object.find(k.name) == nullptr)
      missing += (missing.empty() ? "" : ", ") + std::string(k.name);
  return missing;
}

}  // namespace detail

DDO_INLINE std::string profile_store::format(const capacity_profile& p) {
  json_writer out;
  out.begin_object(json_layout::lines);
  for (const auto& k : detail::profile_keys) {
    if (k.text != nullptr) out.member(k.name, sanitize_utf8(p.*k.text));
    if (k.number != nullptr) out.member(k.name, p.*k.number);
    if (k.name == "format") out.member(k.name, p.format);
    if (k.name == "full_pin") out.member(k.name, p.full_pin);
  }
  out.key("groups").begin_array(json_layout::lines);
  for (const auto& g : p.groups) {
    out.begin_object(json_layout::spaced).member("name", sanitize_utf8(g.name));
    for (const auto& k : detail::group_keys)
      if (k.number != nullptr) out.member(k.name, g.*k.number);
    out.end_object();
  }
  out.end_array().end_object();
  return out.take() + "\n";
}

DDO_INLINE capacity_profile profile_store::parse(std::string_view text, const std::string& file,
                                                 std::string_view expected_name) {
  const auto refuse = [&](const std::string& key, const std::string& what) {
    throw format_error(file, key, file + ": " + what);
  };
  detail::json_value root;
  try {
    root = detail::parse_json(text);
  } catch (const detail::json_error& e) {
    refuse("",
           "not a JSON capacity profile: " + e.message + " at byte " + std::to_string(e.offset));
  }
  if (!root.is_object())
    refuse("", "a capacity profile is a JSON object, found " + std::string(root.describe()));
  // Every key present, none unknown (duplicates the JSON reader refuses); then the values.
  if (const auto* key = detail::unknown_key(detail::profile_keys, root))
    refuse(sanitize_utf8(*key), "unknown key '" + sanitize_utf8(*key) +
                                    "' in a capacity profile (its keys: " +
                                    detail::key_list(detail::profile_keys) + ")");
  if (const auto missing = detail::missing_keys(detail::profile_keys, root); !missing.empty())
    refuse("", "incomplete capacity profile (missing: " + missing + ")");
  capacity_profile p;
  const std::uint64_t format = number_of(*root.find("format"), file, "format");
  if (format != static_cast<std::uint64_t>(capacity_profile_format))
    refuse("format", "capacity profile format " + std::to_string(format) +
                         " is not one this ddo reads (" + std::to_string(capacity_profile_format) +
                         "): calibrate again with build_profile");
  for (const auto& k : detail::profile_keys) {
    if (k.text != nullptr) p.*k.text = text_of(*root.find(k.name), file, std::string(k.name));
    if (k.number != nullptr) p.*k.number = number_of(*root.find(k.name), file, std::string(k.name));
  }
  const auto& full_pin = *root.find("full_pin");
  if (full_pin.type() != detail::json_value::kind::boolean)
    refuse("full_pin", "full_pin must be true or false, found " + std::string(full_pin.describe()));
  p.full_pin = full_pin.boolean();
  const auto& groups = *root.find("groups");
  if (!groups.is_array())
    refuse("groups", "groups must be an array of objects, found " + std::string(groups.describe()));
  p.groups.reserve(groups.items().size());  // the names below point into them
  std::unordered_set<std::string_view> names;
  for (const auto& entry : groups.items()) {
    const std::string at = "group " + std::to_string(p.groups.size());
    if (!entry.is_object())
      refuse("groups", at + " must be an object, found " + std::string(entry.describe()));
    if (const auto* key = detail::unknown_key(detail::group_keys, entry))
      refuse(sanitize_utf8(*key), "unknown key '" + sanitize_utf8(*key) + "' in " + at +
                                      " (a group's keys: " + detail::key_list(detail::group_keys) +
                                      ")");
    if (const auto missing = detail::missing_keys(detail::group_keys, entry); !missing.empty())
      refuse("groups", at + " is missing " + missing);
    auto& g = p.groups.emplace_back();
    g.name = text_of(*entry.find("name"), file, "groups");
    for (const auto& k : detail::group_keys)
      if (k.number != nullptr)
        g.*k.number = number_of(*entry.find(k.name), file, std::string(k.name));
    if (g.name.empty()) refuse("groups", at + " has an empty name");
    if (g.pinned_bytes > UINT64_MAX - g.staged_bytes ||
        g.pinned_bytes + g.staged_bytes > UINT64_MAX - g.file_bytes)
      refuse("groups", "group '" + sanitize_utf8(g.name.substr(0, 200)) +
                           "' has more bytes than 64 bits count");
    if (!names.insert(g.name).second)
      refuse("groups", "group '" + sanitize_utf8(g.name.substr(0, 200)) + "' appears twice");
  }
  if (p.name != expected_name)
    refuse("name", "the profile inside is named '" + sanitize_utf8(p.name) + "', expected '" +
                       std::string(expected_name) + "'");
  if (!p.groups.empty() && (p.tokens_low == 0 || p.tokens_low > p.tokens_high))
    refuse("tokens_low", "a profile with group timings needs 0 < tokens_low <= tokens_high, got " +
                             std::to_string(p.tokens_low) + " and " +
                             std::to_string(p.tokens_high));
  return p;
}

DDO_INLINE std::string profile_store::text_of(const detail::json_value& v, const std::string& file,
                                              const std::string& key) {
  // One line of UTF-8 without control characters: what save() writes (sanitize_utf8), so that
  // what is read formats back to the same file.
  if (!v.is_string())
    throw format_error(file, key,
                       file + ": " + key + " must be a string, found " + std::string(v.describe()));
  const std::string& value = v.text();
  if (!is_valid_utf8(value) || std::any_of(value.begin(), value.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      }))
    throw format_error(file, key,
                       file + ": " + key +
                           " must be UTF-8 text without control characters, got \"" +
                           sanitize_utf8(value.substr(0, 200)) + "\"");
  return value;
}

DDO_INLINE std::uint64_t profile_store::number_of(const detail::json_value& v,
                                                  const std::string& file, const std::string& key) {
  return parse_u64(v.is_number() ? std::string_view(v.text()) : v.describe(), file, key);
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
