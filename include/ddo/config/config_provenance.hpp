// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::config_provenance: for every config field, the source of its resolved value.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// field_id.hpp, not the field registry: the names are all this needs, and the registry's table
// (accessors, allowed values, descriptions) cost every TU including the settings a tenth of the
// umbrella's compile (docs/development.md).
#include "ddo/config/field_id.hpp"
#include "ddo/config/provenance.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One field_origin per registry field (indexed like config_fields(), i.e. by field_id);
/// every field starts as origin::default_value.
class config_provenance {
 public:
  config_provenance() : origins_(field_count) {
    for (std::size_t i = 0; i < origins_.size(); ++i) origins_[i].key = std::string(field_id_names[i]);
  }

  /// @brief The origin of field @p index (an index into config_fields()).
  [[nodiscard]] const field_origin& at(std::size_t index) const { return origins_.at(index); }
  /// @brief The origin of field @p id.
  [[nodiscard]] const field_origin& at(field_id id) const { return origins_.at(field_index(id)); }
  /// @brief The origin of field @p id (the same as at(id)).
  [[nodiscard]] const field_origin& of(field_id id) const { return at(id); }
  /// @brief Records that field @p index was last set by @p where.
  void set(std::size_t index, field_origin where) { origins_.at(index) = std::move(where); }
  /// @brief Records that field @p id was last set by @p where.
  void set(field_id id, field_origin where) { set(field_index(id), std::move(where)); }
  /// @brief Whether field @p id was given by a source the application controls (code, TOML,
  /// environment, flag or component policy), not left at its default, detected on this machine
  /// or set by the preset.
  [[nodiscard]] bool given(field_id id) const {
    const origin source = at(id).source;
    return source != origin::default_value && source != origin::detected &&
           source != origin::preset;
  }
  /// @brief Number of fields.
  [[nodiscard]] std::size_t size() const noexcept { return origins_.size(); }

  friend bool operator==(const config_provenance&, const config_provenance&) = default;

 private:
  std::vector<field_origin> origins_;
};

}  // namespace v0
}  // namespace ddo
