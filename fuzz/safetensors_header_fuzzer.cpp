// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the safetensors header parser (ddo::parse_safetensors_header) and the
// JSON reader under it.
//
// Input layout: the first 8 bytes (little-endian) give the size of the data section the header
// is checked against; the rest is the header's JSON text. Every input must either parse into a
// header whose tensors tile the data section exactly (the reference implementation's rule: each
// begins where the previous ended, the last ends at the data section's end; no gap, no overlap)
// with UTF-8 names, or throw ddo::format_error whose message is valid UTF-8. Any other
// exception, a crash or a sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ddo/core/text.hpp"
#include "ddo/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  std::uint64_t data_bytes = 0;
  for (int i = 7; i >= 0; --i) data_bytes = (data_bytes << 8) | data[i];
  const std::string_view header(reinterpret_cast<const char*>(data + 8), size - 8);
  try {
    const ddo::safetensors_header h =
        ddo::parse_safetensors_header(header, data_bytes, "fuzz-input");
    std::uint64_t previous_end = 0;
    for (const auto& t : h.tensors) {
      if (t.begin != previous_end || t.begin > t.end || t.end > data_bytes) std::abort();
      previous_end = t.end;
      if (!ddo::is_valid_utf8(t.name)) std::abort();
      std::uint64_t elements = 1;
      for (auto d : t.shape) {
        if (d < 0) std::abort();
        elements *= static_cast<std::uint64_t>(d);
      }
      if (elements * ddo::size_of(t.type) != t.end - t.begin) std::abort();
    }
    if (previous_end != data_bytes) std::abort();
  } catch (const ddo::format_error& e) {
    if (e.file() != "fuzz-input" || !ddo::is_valid_utf8(e.what())) std::abort();
  }
  return 0;
}
