// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Execution groups: the units the runtime streams, in the order the engine runs them.
///
/// Inference (infer_execution_groups), in full in docs/planning.md ("Execution groups"):
///  - A bundled single file is split into its parts by prefix (model.diffusion_model.,
///    first_stage_model., conditioner., text_encoders., vae., ...): the diffusion model is the
///    model; the other parts are grouped by the same rules under their own names, never as blocks,
///    text encoders and conditioners before the model, the VAE after it.
///  - Blocks, with the patterns {"auto"} (or none): by structure. Every `<prefix>.<N>` of the
///    module names is a candidate family; the chosen families carry the weights (the one with the
///    most bytes, then each family neither inside nor around a chosen one with a tenth of its
///    bytes; two indices needed, one for the names of auto_block_families; none inside a middle
///    stage). With explicit patterns (core/pattern.hpp's dialect, searched in the module name, the
///    first matching pattern wins) the block is the module-name prefix that ends where the match
///    ends, and N the last run of digits in the match.
///  - Order: blocks of one family by N (2 before 10). With auto, families by stage (input stages:
///    down/input/encoder/double; then others and middle; then output stages: up/output/decoder/
///    single), then first appearance; with explicit patterns, in the order of the patterns (a
///    config states the order so).
///  - Outside the blocks: a top-level middle stage (mid_block, middle_block) is a group of its own
///    between the input and the output stages; other weights go to "<before>" or "<after>" by
///    name (the top-level module first: output modules after; input modules — embedders, time
///    projections, *_in — before), and a weight no name rule places by table position against
///    the first block weight (the documented rule for unknown layouts). Empty groups are omitted.
///  - A table with no block at all gets one group per top-level module (first name component),
///    in table order.
/// Within a group, weights keep table order.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Weights used together, streamed as one unit.
struct execution_group {
  std::string name;                  ///< "transformer_blocks.3", "<before>", "<after>", ...
  std::vector<std::size_t> weights;  ///< weight-table indices, in table order
  /// A numbered block: with `resident_module_patterns` set, blocks are the candidates of the
  /// resident budget. Engine-given groups set it for the groups that may stay resident whole.
  bool is_block = false;
};

/// @brief The block families `resident_module_patterns = {"auto"}` recognises.
inline constexpr std::array<std::string_view, 12> auto_block_families = {
    "transformer_blocks",
    "single_transformer_blocks",
    "double_blocks",
    "single_blocks",
    "blocks",
    "layers",
    "layer",
    "h",
    "block",
    "resblocks",
    "decoder_layers",
    "encoder_layers"};

/// @brief Compiles `resident_module_patterns`: empty or {"auto"} gives no pattern (the built-in
/// families), otherwise one ddo::pattern per entry.
/// @throws config_error (source "config", key "resident_module_patterns") for a pattern outside
/// the dialect, or "auto" mixed with explicit patterns.
[[nodiscard]] DDO_INLINE std::vector<pattern> compile_block_patterns(
    std::span<const std::string> patterns);

/// @brief Infers execution groups from block patterns (see this header's description).
/// @param patterns `resident_module_patterns`: empty or {"auto"} for the built-in families,
/// otherwise regular expressions.
/// @throws config_error (source "config", key "resident_module_patterns") for an invalid pattern.
[[nodiscard]] DDO_INLINE std::vector<execution_group> infer_execution_groups(
    const weight_table& table, std::span<const std::string> patterns = {});

/// @brief As above with patterns compiled once by compile_block_patterns (empty: the built-in
/// families); make_plan passes the patterns it compiled for the whole plan.
[[nodiscard]] DDO_INLINE std::vector<execution_group> infer_execution_groups(
    const weight_table& table, std::span<const pattern> block_patterns);

/// @brief Checks engine-given groups: every weight index valid and in exactly one group, names
/// non-empty and unique; sorts each group's weights into table order.
/// @throws usage_error naming the first offending weight or group.
[[nodiscard]] DDO_INLINE std::vector<execution_group> validate_execution_groups(
    const weight_table& table, std::vector<execution_group> groups);

/// @brief For each weight, the index of its group in @p groups.
[[nodiscard]] DDO_INLINE std::vector<std::size_t> group_of_weights(
    const weight_table& table, std::span<const execution_group> groups);

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/model/detail/execution_groups_impl.hpp"
#endif
