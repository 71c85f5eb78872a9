// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the TOML config reader (ddo::parse_toml_config: toml++ underneath, then
// ddo's keys, types, values, component tables and the top-level/[config] ambiguity rule).
//
// The input is the file's text. Every input must either give a layer whose fields are all known
// settings with a provenance naming the file, or throw ddo::config_error naming the source
// "toml" with a one-line message that is valid UTF-8. Any other exception, a crash or a
// sanitizer report is a bug.
//
// ddo bounds the text before toml++ reads it (ddo/config/toml_limits.hpp: toml++ recursed once
// per dotted part and overflowed the stack). Inputs here are short (fuzz/run: 4 KiB), too short
// to overflow the stack, so the fuzzer checks the bound itself: any text the scan accepts must
// parse to a tree no deeper than max_toml_depth with no more than max_toml_entries nodes. A
// construct the scan misjudges is then found at any size. fuzz/toml.dict holds the tokens of
// deep keys, headers, arrays of tables and inline tables.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/toml_source.hpp"
#include "ddo/core/text.hpp"

namespace {

/// Checks toml++'s tree for @p text against ddo's limits, when ddo's scan accepts the text.
void check_scan_bounds_tree(std::string_view text) {
  try {
    ddo::check_toml_limits(text, "fuzz.toml");
    ddo::detail::refuse_tomlpp_unsafe_text(text, "fuzz.toml");  // as parse_toml_config does
  } catch (const ddo::config_error&) {
    return;  // refused before toml++: nothing to compare
  }
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error&) {
    return;
  }
  // Depth-first without recursion: (node, depth), root's children at depth 1.
  std::vector<std::pair<const toml::node*, std::size_t>> stack;
  std::size_t nodes = 0;
  for (const auto& [key, node] : root) stack.emplace_back(&node, 1);
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > ddo::max_toml_depth || ++nodes > ddo::max_toml_entries) std::abort();
    if (const auto* table = node->as_table())
      for (const auto& [key, child] : *table) stack.emplace_back(&child, depth + 1);
    else if (const auto* array = node->as_array())
      for (const auto& child : *array) stack.emplace_back(&child, depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_scan_bounds_tree(text);
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
    if (e.source() != ddo::origin::toml || what.find('\n') != std::string_view::npos ||
        !ddo::is_valid_utf8(what))
      std::abort();
  }
  return 0;
}
