// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::warn_inactive_fields: the warnings that say a field the application set changes
/// nothing on this platform (see ddo::field_status).

#include <cstddef>
#include <string>
#include <vector>

#include "ddo/config/config_provenance.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_registry.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Appends one warning to @p warnings for every field whose registry status is not
/// field_status::active and that a source the application controls set: code, TOML, the
/// environment, a flag or a component policy. Defaults and presets do not warn. A field given
/// in code warns only when it differs from the default, since a whole config given in code
/// names every field.
inline void warn_inactive_fields(const dynamic_offload_config& config,
                                 const config_provenance& provenance,
                                 std::vector<std::string>& warnings) {
  const dynamic_offload_config defaults{};
  const auto fields = config_fields();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const field_info& info = fields[i];
    if (info.status == field_status::active) continue;
    const auto id = static_cast<field_id>(i);
    if (!provenance.given(id)) continue;
    const field_origin& where = provenance.at(id);
    if (where.source == origin::config && info.get(config) == info.get(defaults)) continue;
    const std::string what = info.status == field_status::no_effect_on_this_platform
                                 ? "has no effect on this platform"
                             : info.status == field_status::single_value
                                 ? "accepts one value only"
                                 : "is not implemented yet";
    warnings.push_back("ddo: " + describe(where) + " sets " + std::string(info.name) + ", which " +
                       what + " (" + std::string(to_string(info.status)) + "): " +
                       std::string(info.status_reason) + "; the value is kept but changes nothing");
  }
}

}  // namespace v0
}  // namespace ddo
