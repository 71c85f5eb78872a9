// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the capacity-profile reader (ddo::profile_store::parse: the JSON object
// profile_store::save writes, read by ddo's JSON reader; the fuzzer's dictionary is its seeds'
// keys, fuzz/seeds-profile).
//
// Every input must either parse into a profile that formats back to text which parses to the
// same profile (a round trip), or throw ddo::format_error naming the file with a message that is
// valid UTF-8. Any other exception, a crash or a sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ddo/core/text.hpp"
#include "ddo/profile/profile_store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = ddo::profile_store::parse(text, "fuzz.json", "fuzz");
    if (!ddo::is_valid_utf8(p.device_name)) std::abort();
    if (p.format != ddo::capacity_profile_format) std::abort();
    for (const auto& g : p.groups)
      if (g.name.empty() || !ddo::is_valid_utf8(g.name)) std::abort();
    if (!p.groups.empty() && (p.tokens_low == 0 || p.tokens_low > p.tokens_high)) std::abort();
    const auto again =
        ddo::profile_store::parse(ddo::profile_store::format(p), "fuzz.json", "fuzz");
    if (!(again == p)) std::abort();
  } catch (const ddo::format_error& e) {
    if (e.file() != "fuzz.json" || !ddo::is_valid_utf8(e.what())) std::abort();
  }
  return 0;
}
