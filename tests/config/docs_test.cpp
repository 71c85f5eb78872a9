// SPDX-License-Identifier: Apache-2.0
// The configuration docs stay in step with the registry: every field, variable, flag and preset
// appears in docs/configuration.md or docs/presets.md.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ddo/config/field_registry.hpp"
#include "ddo/config/presets.hpp"
#include "ddo/config/settings_toml.hpp"

#ifndef DDO_DOCS_DIR
#error "DDO_DOCS_DIR must name the docs directory (tests/config/meson.build defines it)"
#endif

namespace {

std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(DDO_DOCS_DIR) + "/" + name);
  REQUIRE_MESSAGE(in.good(), "cannot read docs/" << name);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The rows `| `field` | `value` | ...` of preset @p preset's section of docs/presets.md (the
/// section whose `###` heading names it), as (field, value without backticks); "(kept)" rows,
/// which document defaults the preset leaves alone, are not the preset's values.
std::vector<std::pair<std::string, std::string>> documented_values(const std::string& doc,
                                                                   std::string_view preset) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::istringstream lines(doc);
  std::string line;
  bool inside = false;
  while (std::getline(lines, line)) {
    if (line.rfind("#", 0) == 0) {
      inside = line.rfind("### ", 0) == 0 &&
               line.find("`" + std::string(preset) + "`") != std::string::npos;
      continue;
    }
    if (!inside || line.rfind("| `", 0) != 0) continue;
    const auto cell = [&](std::size_t n) {  // the n-th cell, trimmed, backticks removed
      std::size_t at = 0;
      for (std::size_t i = 0; i <= n; ++i) at = line.find('|', at) + 1;
      std::string text = line.substr(at, line.find('|', at) - at);
      text = text.substr(text.find_first_not_of(' '));
      text = text.substr(0, text.find_last_not_of(' ') + 1);
      if (text.size() >= 2 && text.front() == '`' && text.back() == '`')
        text = text.substr(1, text.size() - 2);
      return text;
    };
    rows.emplace_back(cell(0), cell(1));
  }
  return rows;
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("docs/configuration.md has an entry for every field, variable, flag and status") {
    const std::string doc = read_doc("configuration.md");
    for (const auto& info : ddo::config_fields()) {
      CAPTURE(info.name);
      const std::string row_start = "| `" + std::string(info.name) + "` |";
      const auto row = doc.find(row_start);
      REQUIRE(row != std::string::npos);
      // The row's last column is the registry's status.
      const std::string line = doc.substr(row, doc.find('\n', row) - row);
      const std::string status = "| `" + std::string(ddo::to_string(info.status)) + "` |";
      CHECK(line.size() >= status.size());
      CHECK(line.compare(line.size() - status.size(), status.size(), status) == 0);
      if (!info.env.empty()) CHECK(doc.find("`" + std::string(info.env) + "`") != std::string::npos);
      if (info.has_flag) CHECK(doc.find("`" + info.flag() + "`") != std::string::npos);
    }
  }

  TEST_CASE("docs/presets.md documents every preset and every value it sets") {
    const std::string doc = read_doc("presets.md");
    for (std::string_view preset : ddo::preset_names) {
      CAPTURE(preset);
      CHECK(doc.find("`" + std::string(preset) + "`") != std::string::npos);
      for (const auto& [field, value] : ddo::preset_values(preset)) {
        const std::string name(ddo::to_string(field));
        CAPTURE(name);
        CHECK(doc.find("| `" + name + "` |") != std::string::npos);
      }
    }
  }

  TEST_CASE("each preset's values in docs/presets.md are the code's, in both directions") {
    // issue 30: a value dropped from config/presets.hpp (low_ram_safe's auto_vram_headroom_gb)
    // passed, as the test above checks field names only. The code's table (preset_values) is the
    // one source; its section of docs/presets.md must list exactly its values, as TOML.
    const std::string doc = read_doc("presets.md");
    for (std::string_view preset : ddo::preset_names) {
      if (preset == "auto") continue;  // resolves to another preset
      CAPTURE(preset);
      const auto rows = documented_values(doc, preset);
      const auto values = ddo::preset_values(preset);
      CHECK(!values.empty());
      for (const auto& [field, value] : values) {  // code -> docs
        const std::string name(ddo::to_string(field));
        CAPTURE(name);
        const auto row =
            std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == name; });
        REQUIRE_MESSAGE(row != rows.end(), "docs/presets.md does not list " << name);
        CHECK(row->second == ddo::toml_value(value));
      }
      for (const auto& row : rows) {  // docs -> code (no binding: clang 14 cannot capture one)
        const std::string& name = row.first;
        const std::string& text = row.second;
        CAPTURE(name);
        const bool in_code = std::any_of(values.begin(), values.end(), [&](const auto& v) {
          return ddo::to_string(v.first) == name;
        });
        CHECK_MESSAGE(in_code, "docs/presets.md lists " << name << " = " << text
                                                        << ", which the preset does not set");
      }
    }
  }
}
