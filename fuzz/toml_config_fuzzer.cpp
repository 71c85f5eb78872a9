// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the TOML config reader (ddo::parse_toml_config: toml++ underneath, then
// ddo's keys, types, values, component tables and the top-level/[config] ambiguity rule).
//
// The input is the file's text. Every input must either give a layer whose fields are all known
// settings with a provenance naming the file, or throw ddo::config_error naming the source
// "toml" with a one-line message that is valid UTF-8. Any other exception, a crash or a
// sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ddo/config/toml_source.hpp"
#include "ddo/core/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ddo::config_layer layer = ddo::parse_toml_config(text, "fuzz.toml");
    for (const auto& f : layer.fields) {
      if (f.field >= ddo::config_fields().size()) std::abort();
      if (f.where.key.rfind("fuzz.toml:", 0) != 0) std::abort();
      for (const auto& other : layer.fields)
        if (&other != &f && other.field == f.field) std::abort();  // set twice: must be refused
    }
  } catch (const ddo::config_error& e) {
    const std::string_view what = e.what();
    if (e.source() != "toml" || what.find('\n') != std::string_view::npos ||
        !ddo::is_valid_utf8(what))
      std::abort();
  }
  return 0;
}
