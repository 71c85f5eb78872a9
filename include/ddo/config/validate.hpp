// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Validation of a resolved config: every rule of the reference, with messages naming the
/// field, its source (variable, flag, TOML key), the value seen and what is allowed.

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ddo/config/config_provenance.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/toml_limits.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/core/thread_limits.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

inline std::string format_number(double value) {
  std::string text = std::to_string(value);
  while (text.size() > 1 && text.back() == '0') text.pop_back();
  if (!text.empty() && text.back() == '.') text += '0';
  return text;
}

[[noreturn]] inline void throw_invalid(const config_provenance& provenance, field_id id,
                                       const std::string& seen, const std::string& rule) {
  const field_origin& where = provenance.of(id);
  const std::string_view name = to_string(id);
  std::string message = describe(where) + " = " + seen;
  if (where.key != name) message += " (" + std::string(name) + ")";
  message += ": " + rule;
  throw config_error(where.source, where.key, message);
}

inline void check_patterns(const config_provenance& provenance, field_id id,
                           const std::vector<std::string>& patterns) {
  // The loop variable is not called `pattern`: nvcc's front end then fails to see ddo::pattern.
  for (const auto& text : patterns) {
    if (text == "auto" && id == field_id::resident_module_patterns) continue;
    try {
      const ddo::pattern compiled(text);
      (void)compiled;
    } catch (const pattern_error& error) {
      throw_invalid(provenance, id, "\"" + text + "\"",
                    std::string("not a valid regular expression (") + error.what() + ")");
    }
  }
}

inline bool is_cuda_device(std::string_view device) {
  if (device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  for (char c : device.substr(5))
    if (c < '0' || c > '9') return false;
  return true;
}

/// Field @p info of @p config against the bounds of its type and unit. Every size converts to
/// bytes (gib_to_bytes, ...): bounded here, where the value's source is known, so that no
/// conversion saturates or wraps later.
/// One limit for a string value whatever its source: a longer one from flags or the environment
/// was accepted, then refused when ddo-config's own TOML output was read back (issue 37).
inline void check_value_bytes(const field_info& info, const std::string& value,
                              const config_provenance& provenance, const std::string& which) {
  if (value.size() > max_config_value_bytes)
    throw_invalid(provenance, info.id, which + "a string of " + std::to_string(value.size()) +
                  " bytes", "the limit is " + std::to_string(max_config_value_bytes) +
                                " bytes, whatever the source (ddo/config/toml_limits.hpp), so that "
                                "ddo-config's TOML output reads back");
}

inline void check_bounds(const field_info& info, const dynamic_offload_config& config,
                         const config_provenance& provenance) {
  const std::uint64_t most = info.unit == "GiB"     ? static_cast<std::uint64_t>(max_stated_gib)
                             : info.unit == "MiB"   ? max_stated_mib
                             : info.unit == "bytes" ? max_stated_bytes
                                                    : 0;
  const auto over = [&](const std::string& seen) {
    throw_invalid(provenance, info.id, seen,
                  "must be from 0 to " + std::to_string(most) + " " + std::string(info.unit) +
                      " (16 PiB: larger than any machine)");
  };
  if (info.type == field_type::text) {
    check_value_bytes(info, std::get<std::string>(info.get(config)), provenance, "");
  } else if (info.type == field_type::pattern_list || info.type == field_type::kind_list) {
    const field_value value = info.get(config);
    const auto& list = std::get<std::vector<std::string>>(value);
    if (list.size() > max_config_list_elements)
      throw_invalid(provenance, info.id, std::to_string(list.size()) + " elements",
                    "the limit is " + std::to_string(max_config_list_elements) +
                        " elements, whatever the source (ddo/config/toml_limits.hpp)");
    for (std::size_t i = 0; i < list.size(); ++i)
      check_value_bytes(info, list[i], provenance, "element " + std::to_string(i) + ": ");
  }
  if (info.type == field_type::count) {
    const auto value = std::get<std::int64_t>(info.get(config));
    if (most != 0 && value > 0 && static_cast<std::uint64_t>(value) > most)
      over(std::to_string(value));
  } else if (info.type == field_type::real || info.type == field_type::ratio) {
    const double value = std::get<double>(info.get(config));
    if (!std::isfinite(value))
      throw_invalid(provenance, info.id, format_number(value), "must be a finite number");
    if (info.type == field_type::real && value < 0)
      throw_invalid(provenance, info.id, format_number(value), "must be 0 or more");
    if (most != 0 && value > static_cast<double>(most)) over(format_number(value));
  }
}

}  // namespace detail

/// @brief The size of one VMM segment of retained-source registration (64 MiB).
inline constexpr std::uint64_t vmm_segment_bytes = 64 * mib;

/// @brief Checks @p config, clamping pin_weight_budget_ratio to 0..1 (the reference's rule; a
/// warning is added to @p warnings when it clamps).
/// @throws config_error naming the field's source, the value and the rule, for: non-finite or
/// negative sizes; pin_cpu_workers < 1; execution_device not cuda[:N]; offload_device not cpu;
/// vmm_page_mb not a multiple of 2; vmm_source_registered_gb not whole 64 MiB segments or above
/// vmm_source_cache_gb; vmm_runtime without a positive vmm_resident_weight_budget_gb or
/// vmm_staging_buffer_gb; backend vmm without execution_mode vmm_runtime; a micro-cache slot
/// size without a slot count (or the reverse); vmm_component_tensor_ownership off the native
/// route; build_profile without profile_name; invalid regexes.
inline void validate(dynamic_offload_config& config, const config_provenance& provenance,
                     std::vector<std::string>& warnings) {
  using detail::format_number;
  for (const auto& info : config_fields()) detail::check_bounds(info, config, provenance);
  if (config.pin_weight_budget_ratio < 0.0 || config.pin_weight_budget_ratio > 1.0) {
    const double clamped = config.pin_weight_budget_ratio < 0.0 ? 0.0 : 1.0;
    warnings.push_back("ddo: " + describe(provenance.of(field_id::pin_weight_budget_ratio)) +
                       " = " + format_number(config.pin_weight_budget_ratio) +
                       " is outside 0.0..1.0; clamped to " + format_number(clamped));
    config.pin_weight_budget_ratio = clamped;
  }
  // The rules between fields, in this order: each the condition that breaks it, the field
  // blamed, the value seen and the rule.
  const auto check = [&](bool broken, field_id id, const std::string& seen,
                         const std::string& why) {
    if (broken) detail::throw_invalid(provenance, id, seen, why);
  };
  const auto quoted = [](std::string_view text) { return "\"" + std::string(text) + "\""; };
  check(config.pin_cpu_workers < 1 ||
            static_cast<std::size_t>(config.pin_cpu_workers) > max_worker_threads,
        field_id::pin_cpu_workers, std::to_string(config.pin_cpu_workers),
        "must be a positive worker count, at most " + std::to_string(max_worker_threads) +
            " (ddo/core/thread_limits.hpp); setup starts no more than it has work for");
  check(!detail::is_cuda_device(config.execution_device), field_id::execution_device,
        quoted(config.execution_device), "expected \"cuda\" or \"cuda:N\"");
  check(config.offload_device != "cpu", field_id::offload_device, quoted(config.offload_device),
        "expected \"cpu\" (ddo keeps inactive weights in host memory)");
  check(config.vmm_page_mb % 2 != 0, field_id::vmm_page_mb, std::to_string(config.vmm_page_mb),
        "must be 0 (default geometry) or a multiple of 2 (the 2 MiB VMM granularity)");
  const long double segments = static_cast<long double>(config.vmm_source_registered_gb) *
                               static_cast<long double>(gib) / vmm_segment_bytes;
  check(std::fabs(segments - std::round(segments)) > 1e-6L, field_id::vmm_source_registered_gb,
        format_number(config.vmm_source_registered_gb),
        "must be whole 64 MiB segments (a multiple of 0.0625 GiB)");
  check(config.vmm_source_registered_gb > config.vmm_source_cache_gb,
        field_id::vmm_source_registered_gb, format_number(config.vmm_source_registered_gb),
        "must be within the retained storage vmm_source_cache_gb = " +
            format_number(config.vmm_source_cache_gb) + " (" +
            describe(provenance.of(field_id::vmm_source_cache_gb)) + ")");
  const bool no_slots = config.vmm_native_source_cache_slots == 0;
  check((config.vmm_native_source_cache_slot_mb == 0) != no_slots,
        no_slots ? field_id::vmm_native_source_cache_slot_mb
                 : field_id::vmm_native_source_cache_slots,
        std::to_string(no_slots ? config.vmm_native_source_cache_slot_mb
                                : config.vmm_native_source_cache_slots),
        "vmm_native_source_cache_slot_mb and vmm_native_source_cache_slots go together: set both "
        "or neither");
  const bool vmm_runtime = config.execution_mode == exec_mode::vmm_runtime;
  for (const auto& [id, value, example] :
       {std::tuple{field_id::vmm_resident_weight_budget_gb, config.vmm_resident_weight_budget_gb,
                   "4.0"},
        std::tuple{field_id::vmm_staging_buffer_gb, config.vmm_staging_buffer_gb, "0.625"}}) {
    // Blame the source that asked for the VMM route when nobody set the size.
    if (provenance.of(id).source == origin::default_value)
      check(vmm_runtime && !(value > 0.0), field_id::execution_mode, quoted("vmm_runtime"),
            "the VMM route needs a positive " + std::string(to_string(id)) + " (e.g. " + example +
                "), which no source sets");
    check(vmm_runtime && !(value > 0.0), id, format_number(value),
          "execution_mode vmm_runtime needs a positive size (e.g. " + std::string(example) + ")");
  }
  const std::string mode_seen = "execution_mode is " + quoted(enum_name(config.execution_mode)) +
                                " (" + describe(provenance.of(field_id::execution_mode)) + ")";
  // Ownership is the native route's (the reference: "native fast only").
  check(
      config.vmm_component_tensor_ownership &&
          !(vmm_runtime && (config.vmm_native_transport || config.vmm_source_cache_gb > 0.0)),
      field_id::vmm_component_tensor_ownership, "true",
      "component tensor ownership is for the native VMM route only (vmm_fast_runtime: "
      "execution_mode vmm_runtime with vmm_native_transport or a positive vmm_source_cache_gb); " +
          mode_seen);
  check(config.backend == offload_backend::vmm && !vmm_runtime, field_id::backend, "\"vmm\"",
        "backend vmm needs execution_mode vmm_runtime, but " + mode_seen);
  check(config.build_profile && config.profile_name.empty(), field_id::build_profile, "true",
        "build_profile needs a profile_name");
  for (const auto& info : config_fields())
    if (info.type == field_type::pattern_list)
      detail::check_patterns(provenance, info.id,
                             std::get<std::vector<std::string>>(info.get(config)));
  detail::check_patterns(provenance, field_id::vmm_module_pattern, {config.vmm_module_pattern});
}

}  // namespace v0
}  // namespace ddo
