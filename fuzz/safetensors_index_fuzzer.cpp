// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the sharded-model index reader (the text of a
// `*.safetensors.index.json`: ddo::detail::parse_safetensors_index and the JSON reader).
//
// Every input must either give shard names that are non-empty relative paths without "..",
// each tensor mapped to one of the listed shards, or throw ddo::format_error naming the index
// with a message that is valid UTF-8. Any other exception, a crash or a sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include "ddo/core/text.hpp"
#include "ddo/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto index = ddo::detail::parse_safetensors_index(text, "fuzz-index.json");
    const std::set<std::string> shards(index.shards.begin(), index.shards.end());
    if (shards.size() != index.shards.size()) std::abort();  // listed once each
    for (const auto& shard : index.shards) {
      const std::filesystem::path p(shard);
      if (shard.empty() || p.is_absolute()) std::abort();
      for (const auto& part : p)
        if (part == "..") std::abort();
    }
    for (const auto& [tensor, shard] : index.shard_of)
      if (!shards.contains(shard)) std::abort();
  } catch (const ddo::format_error& e) {
    if (e.file() != "fuzz-index.json" || !ddo::is_valid_utf8(e.what())) std::abort();
  }
  return 0;
}
