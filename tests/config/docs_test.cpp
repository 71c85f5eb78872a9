// SPDX-License-Identifier: Apache-2.0
// The configuration docs stay in step with the registry: every field, variable, flag and preset
// appears in docs/configuration.md or docs/presets.md.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "ddo/config/field_registry.hpp"
#include "ddo/config/presets.hpp"

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
}
