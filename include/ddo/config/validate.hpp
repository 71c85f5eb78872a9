// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Validation of a resolved config: every rule of the reference, with messages naming the
/// field, its source (variable, flag, TOML key), the value seen and what is allowed.

#include <cmath>
#include <string>
#include <vector>

#include "ddo/config/config_provenance.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/config/field_registry.hpp"
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
  using detail::throw_invalid;
  const auto fields = config_fields();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& info = fields[i];
    if (info.type == field_type::count) {
      // Sizes in MiB or bytes: bounded like the GiB sizes below, before any conversion.
      const auto value = std::get<std::int64_t>(info.get(config));
      const std::uint64_t most = info.unit == "MiB"     ? max_stated_mib
                                 : info.unit == "bytes" ? max_stated_bytes
                                                        : 0;
      if (most != 0 && value > 0 && static_cast<std::uint64_t>(value) > most)
        throw_invalid(provenance, info.id, std::to_string(value),
                      "must be from 0 to " + std::to_string(most) + " " + std::string(info.unit) +
                          " (16 PiB: larger than any machine)");
      continue;
    }
    if (info.type != field_type::real && info.type != field_type::ratio) continue;
    const double value = std::get<double>(info.get(config));
    if (!std::isfinite(value))
      throw_invalid(provenance, info.id, format_number(value), "must be a finite number");
    if (info.type == field_type::real && value < 0)
      throw_invalid(provenance, info.id, format_number(value), "must be 0 or more");
    // Every size in GiB converts to bytes through gib_to_bytes: bounded here, where the value's
    // source is known, so that no conversion saturates or wraps later.
    if (info.unit == "GiB" && value > max_stated_gib)
      throw_invalid(provenance, info.id, format_number(value),
                    "must be from 0 to 16777216 GiB (16 PiB: larger than any machine)");
  }
  if (config.pin_weight_budget_ratio < 0.0 || config.pin_weight_budget_ratio > 1.0) {
    const double clamped = config.pin_weight_budget_ratio < 0.0 ? 0.0 : 1.0;
    warnings.push_back("ddo: " + describe(provenance.of(field_id::pin_weight_budget_ratio)) +
                       " = " + format_number(config.pin_weight_budget_ratio) +
                       " is outside 0.0..1.0; clamped to " + format_number(clamped));
    config.pin_weight_budget_ratio = clamped;
  }
  if (config.pin_cpu_workers < 1 ||
      static_cast<std::size_t>(config.pin_cpu_workers) > max_worker_threads)
    throw_invalid(provenance, field_id::pin_cpu_workers, std::to_string(config.pin_cpu_workers),
                  "must be a positive worker count, at most " + std::to_string(max_worker_threads) +
                      " (ddo/core/thread_limits.hpp); setup starts no more than it has work for");
  if (!detail::is_cuda_device(config.execution_device))
    throw_invalid(provenance, field_id::execution_device, "\"" + config.execution_device + "\"",
                  "expected \"cuda\" or \"cuda:N\"");
  if (config.offload_device != "cpu")
    throw_invalid(provenance, field_id::offload_device, "\"" + config.offload_device + "\"",
                  "expected \"cpu\" (ddo keeps inactive weights in host memory)");
  if (config.vmm_page_mb != 0 && config.vmm_page_mb % 2 != 0)
    throw_invalid(provenance, field_id::vmm_page_mb, std::to_string(config.vmm_page_mb),
                  "must be 0 (default geometry) or a multiple of 2 (the 2 MiB VMM granularity)");
  if (config.vmm_source_registered_gb > 0.0) {
    const long double bytes =
        static_cast<long double>(config.vmm_source_registered_gb) * static_cast<long double>(gib);
    const long double segments = bytes / static_cast<long double>(vmm_segment_bytes);
    if (std::fabs(segments - std::round(segments)) > 1e-6L)
      throw_invalid(provenance, field_id::vmm_source_registered_gb,
                    format_number(config.vmm_source_registered_gb),
                    "must be whole 64 MiB segments (a multiple of 0.0625 GiB)");
    if (config.vmm_source_registered_gb > config.vmm_source_cache_gb)
      throw_invalid(provenance, field_id::vmm_source_registered_gb,
                    format_number(config.vmm_source_registered_gb),
                    "must be within the retained storage vmm_source_cache_gb = " +
                        format_number(config.vmm_source_cache_gb) + " (" +
                        describe(provenance.of(field_id::vmm_source_cache_gb)) + ")");
  }
  if ((config.vmm_native_source_cache_slot_mb == 0) != (config.vmm_native_source_cache_slots == 0)) {
    const bool slots_missing = config.vmm_native_source_cache_slots == 0;
    const field_id id = slots_missing ? field_id::vmm_native_source_cache_slot_mb
                                      : field_id::vmm_native_source_cache_slots;
    const auto value = slots_missing ? config.vmm_native_source_cache_slot_mb
                                     : config.vmm_native_source_cache_slots;
    throw_invalid(provenance, id, std::to_string(value),
                  "vmm_native_source_cache_slot_mb and vmm_native_source_cache_slots go together: "
                  "set both or neither");
  }
  if (config.execution_mode == exec_mode::vmm_runtime) {
    // Blame the source that asked for the VMM route when nobody set the budget.
    const auto require_positive = [&](field_id id, double value, const char* example) {
      if (value > 0.0) return;
      if (provenance.of(id).source == origin::default_value)
        throw_invalid(provenance, field_id::execution_mode, "\"vmm_runtime\"",
                      "the VMM route needs a positive " + std::string(to_string(id)) + " (e.g. " +
                          example + "), which no source sets");
      throw_invalid(
          provenance, id, format_number(value),
          "execution_mode vmm_runtime needs a positive size (e.g. " + std::string(example) + ")");
    };
    require_positive(field_id::vmm_resident_weight_budget_gb, config.vmm_resident_weight_budget_gb,
                     "4.0");
    require_positive(field_id::vmm_staging_buffer_gb, config.vmm_staging_buffer_gb, "0.625");
  }
  // Ownership is the native route's (the reference: "native fast only").
  if (config.vmm_component_tensor_ownership &&
      !(config.execution_mode == exec_mode::vmm_runtime &&
        (config.vmm_native_transport || config.vmm_source_cache_gb > 0.0)))
    throw_invalid(provenance, field_id::vmm_component_tensor_ownership, "true",
                  "component tensor ownership is for the native VMM route only (vmm_fast_runtime: "
                  "execution_mode vmm_runtime with vmm_native_transport or a positive "
                  "vmm_source_cache_gb); execution_mode is \"" +
                      std::string(enum_name(config.execution_mode)) + "\" (" +
                      describe(provenance.of(field_id::execution_mode)) + ")");
  if (config.backend == offload_backend::vmm && config.execution_mode != exec_mode::vmm_runtime)
    throw_invalid(provenance, field_id::backend, "\"vmm\"",
                  "backend vmm needs execution_mode vmm_runtime, but execution_mode is \"" +
                      std::string(enum_name(config.execution_mode)) + "\" (" +
                      describe(provenance.of(field_id::execution_mode)) + ")");
  if (config.build_profile && config.profile_name.empty())
    throw_invalid(provenance, field_id::build_profile, "true",
                  "build_profile needs a profile_name");
  detail::check_patterns(provenance, field_id::skip_modules_pattern, config.skip_modules_pattern);
  detail::check_patterns(provenance, field_id::always_resident_modules_pattern,
                         config.always_resident_modules_pattern);
  detail::check_patterns(provenance, field_id::resident_module_patterns,
                         config.resident_module_patterns);
  detail::check_patterns(provenance, field_id::vmm_module_pattern, {config.vmm_module_pattern});
}

}  // namespace v0
}  // namespace ddo
