// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::lora_adapter: a LoRA safetensors file read and mapped onto a base model's weight
/// table (key namings: adapter/lora_keys.hpp), its factors in fp32 on the host, ready to merge
/// (adapter/lora_merge.hpp). Loading refuses, with a format_error naming the file and the key:
/// a key that is no LoRA factor, a down factor without its up factor (or the reverse), a module
/// that maps to no base weight (or to two), a shape that does not fit the base weight, a factor
/// or alpha of a non-float type, a base weight the merge cannot take (fp8, integer: the engine
/// applies the delta in its own GEMM there, docs/adapters.md), and two keys on one weight.

#include <string>

#include "ddo/adapter/lora_delta.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Reads the LoRA file @p path (PEFT/diffusers or kohya naming) and maps it onto @p base.
/// Nothing of @p base or its files is written.
/// @throws format_error naming the file and key (see the file comment), io_error.
[[nodiscard]] inline lora_adapter load_lora_adapter(const std::string& path,
                                                    const weight_table& base);

}  // namespace v0
}  // namespace ddo

#include "ddo/adapter/detail/lora_load_impl.hpp"
