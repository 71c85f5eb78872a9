// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of execution-group inference (model/execution_groups.hpp).

#include <tuple>
#include <unordered_map>
#include <unordered_set>

// Part of ddo/model/execution_groups.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

[[nodiscard]] DDO_INLINE std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const auto dot = s.find('.', start);
    parts.push_back(
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

[[nodiscard]] DDO_INLINE std::optional<std::uint64_t> parse_index(std::string_view s) noexcept {
  if (s.empty() || s.size() > 18) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

/// Where a module belongs: its block key, the block's family and its index.
struct block_match {
  std::string key;
  std::string family;
  std::uint64_t index = 0;
};

[[nodiscard]] DDO_INLINE std::optional<block_match> match_auto_block(std::string_view module_name) {
  const auto parts = split_dots(module_name);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    if (std::find(auto_block_families.begin(), auto_block_families.end(), parts[i]) ==
        auto_block_families.end())
      continue;
    const auto index = parse_index(parts[i + 1]);
    if (!index) continue;
    block_match m;
    // Appended piece by piece: `"literal" + std::string` trips g++ 12's -Wrestrict at -O3.
    for (std::size_t j = 0; j <= i; ++j) {
      if (j != 0) m.family += '.';
      m.family += parts[j];
    }
    m.key = m.family;
    m.key += '.';
    m.key += parts[i + 1];
    m.index = *index;
    return m;
  }
  return std::nullopt;
}

[[nodiscard]] DDO_INLINE std::optional<block_match> match_pattern_block(
    const std::string& module_name, std::span<const pattern> patterns) {
  for (std::size_t p = 0; p < patterns.size(); ++p) {
    const auto m = patterns[p].find(module_name);
    if (!m || m->length == 0) continue;
    const auto end = m->position + m->length;
    std::string key = module_name.substr(0, end);
    while (!key.empty() && key.back() == '.') key.pop_back();
    if (key.empty()) continue;
    // The block index is the last run of digits inside the match.
    const std::string matched = module_name.substr(m->position, m->length);
    std::size_t d_end = matched.size();
    while (d_end > 0 && (matched[d_end - 1] < '0' || matched[d_end - 1] > '9')) --d_end;
    std::size_t d_begin = d_end;
    while (d_begin > 0 && matched[d_begin - 1] >= '0' && matched[d_begin - 1] <= '9') --d_begin;
    block_match b;
    b.key = key;
    const auto index = parse_index(std::string_view(matched).substr(d_begin, d_end - d_begin));
    b.index = index.value_or(0);
    // The family: the pattern and the prefix before the index, so "a.3" and "b.3" of one
    // pattern stay apart.
    b.family = std::to_string(p) + ":" + module_name.substr(0, m->position + d_begin);
    return b;
  }
  return std::nullopt;
}

[[nodiscard]] DDO_INLINE bool has_component(std::string_view module_name,
                                            bool (*predicate)(std::string_view)) {
  for (auto part : split_dots(module_name))
    if (predicate(part)) return true;
  return false;
}

[[nodiscard]] DDO_INLINE bool is_output_component(std::string_view c) {
  for (std::string_view n :
       {"norm_out", "proj_out", "conv_out", "final_layer", "lm_head", "ln_f", "norm_f", "head",
        "output", "norm", "final_layer_norm", "norm_final", "out", "unpatchify"})
    if (c == n) return true;
  return c.starts_with("final_") || c.ends_with("_out");
}

[[nodiscard]] DDO_INLINE bool is_input_component(std::string_view c) {
  if (c.find("embed") != std::string_view::npos || c.starts_with("time") || c.ends_with("_in") ||
      c.starts_with("pos_") || c.starts_with("patch"))
    return true;
  for (std::string_view n :
       {"img_in", "txt_in", "conv_in", "proj_in", "time_in", "vector_in", "guidance_in", "input",
        "wte", "wpe", "shared", "x_embedder", "context_embedder", "t_embedder", "y_embedder"})
    if (c == n) return true;
  return false;
}

/// Stages that run between the block families (UNet's mid block).
[[nodiscard]] DDO_INLINE bool is_middle_component(std::string_view c) {
  return c == "mid_block" || c == "mid" || c == "middle_block" || c == "middle";
}

/// Where a family runs among the others, by its last name component: 0 input stages (down,
/// input, encoder, double), 1 unknown or middle, 2 output stages (up, output, decoder, single).
[[nodiscard]] DDO_INLINE int family_rank(std::string_view family) {
  while (!family.empty() && family.back() == '.') family.remove_suffix(1);
  const auto dot = family.rfind('.');
  std::string_view leaf = dot == std::string_view::npos ? family : family.substr(dot + 1);
  if (const auto colon = leaf.rfind(':'); colon != std::string_view::npos)
    leaf = leaf.substr(colon + 1);
  for (std::string_view n : {"down", "input", "encoder", "double"})
    if (leaf.starts_with(n)) return 0;
  for (std::string_view n : {"up", "output", "decoder", "single"})
    if (leaf.starts_with(n)) return 2;
  return 1;
}

/// The auto rule's block families of one component: every `<prefix>.<N>` in the module names
/// is a candidate family; the chosen ones carry the most bytes (the largest first, then every
/// family neither inside nor around a chosen one with at least a tenth of its bytes), with at
/// least two indices (one for the names of auto_block_families).
[[nodiscard]] DDO_INLINE std::vector<std::string> choose_block_families(
    const weight_table& table, std::span<const std::size_t> members, std::size_t strip) {
  struct family_stats {
    std::uint64_t bytes = 0;
    // Only "one index or several" matters: a family of 35,000 blocks kept every index in a
    // vector searched per weight, which made grouping a 1,000,000-tensor table quadratic.
    std::uint64_t first_index = 0;
    bool several_indices = false;
    std::size_t first = 0;
  };
  std::map<std::string, family_stats> stats;
  for (std::size_t i : members) {
    const std::string_view module = std::string_view(table[i].module_name).substr(strip);
    const auto parts = split_dots(module);
    std::string prefix;
    for (std::size_t p = 0; p + 1 < parts.size(); ++p) {
      if (p != 0)
        prefix += '.';  // piece by piece: `"." + std::string` trips g++ 12 -Wrestrict at -O3
      prefix += parts[p];
      const auto index = parse_index(parts[p + 1]);
      if (!index) continue;
      auto [it, inserted] = stats.emplace(prefix, family_stats{});
      if (inserted) {
        it->second.first = i;
        it->second.first_index = *index;
      }
      it->second.bytes += table[i].bytes;
      if (*index != it->second.first_index) it->second.several_indices = true;
    }
  }
  auto known = [](const std::string& family) {
    const auto dot = family.rfind('.');
    const std::string_view leaf = dot == std::string::npos
                                      ? std::string_view(family)
                                      : std::string_view(family).substr(dot + 1);
    return std::find(auto_block_families.begin(), auto_block_families.end(), leaf) !=
           auto_block_families.end();
  };
  // A middle stage runs as one unit: families inside it are not blocks (its own numbered
  // family, ldm's middle_block.N, is).
  auto inside_middle = [](const std::string& family) {
    const auto dot = family.find('.');
    return dot != std::string::npos && is_middle_component(std::string_view(family).substr(0, dot));
  };
  std::vector<std::pair<std::string, const family_stats*>> ranked;
  for (const auto& [name, st] : stats)
    if ((st.several_indices || known(name)) && !inside_middle(name)) ranked.emplace_back(name, &st);
  // Most bytes first; equal bytes: the outer family (it runs as a unit), then table order.
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    if (a.second->bytes != b.second->bytes) return a.second->bytes > b.second->bytes;
    if (a.first.size() != b.first.size()) return a.first.size() < b.first.size();
    return a.second->first < b.second->first;
  });
  std::vector<std::string> chosen;
  auto related = [](const std::string& a, const std::string& b) {
    return (a.size() > b.size() && a.starts_with(b) && a[b.size()] == '.') ||
           (b.size() > a.size() && b.starts_with(a) && b[a.size()] == '.') || a == b;
  };
  for (const auto& [name, st] : ranked) {
    if (!chosen.empty() && (st->bytes < ranked.front().second->bytes / 10 || !st->several_indices))
      continue;
    // A named reference, not the binding: clang 14 (the sanitizer builds) cannot capture a
    // structured binding in a lambda.
    const std::string& family = name;
    if (std::any_of(chosen.begin(), chosen.end(),
                    [&](const std::string& c) { return related(c, family); }))
      continue;
    chosen.push_back(name);
  }
  return chosen;
}

/// The block of @p module_name (stripped by @p strip) among the chosen families.
[[nodiscard]] DDO_INLINE std::optional<block_match> match_family(
    std::string_view module_name, std::size_t strip, const std::vector<std::string>& families) {
  // Not called `module`: nvcc (C++20) reads `module` at the start of a line as the module
  // keyword and the nvcc build check fails (clang-format may wrap a line there).
  const std::string_view stripped = module_name.substr(strip);
  for (const auto& family : families) {
    if (stripped.size() <= family.size() + 1 || !stripped.starts_with(family) ||
        stripped[family.size()] != '.')
      continue;
    const std::string_view rest = stripped.substr(family.size() + 1);
    const auto index = parse_index(rest.substr(0, rest.find('.')));
    if (!index) continue;
    block_match m;
    m.family = std::string(module_name.substr(0, strip)) + family;
    m.key = m.family + "." + std::to_string(*index);
    m.index = *index;
    return m;
  }
  return std::nullopt;
}

/// One component of a table (a bundled file's diffusion model, VAE, text encoder, or the whole
/// table): its weights and the name prefix they share.
struct table_component {
  std::string prefix;  ///< "model.diffusion_model.", "first_stage_model.", ... or ""
  std::vector<std::size_t> weights;
  int place = 0;  ///< -1 runs before the main component, 0 is it, 1 runs after
};

/// Bundled single files: the prefixes of the parts a checkpoint bundles with its model, and
/// where each runs relative to the model (text encoders and conditioners before, the VAE after).
inline constexpr std::array<std::pair<std::string_view, int>, 10> bundle_prefixes = {{
    {"model.diffusion_model.", 0},
    {"conditioner.", -1},
    {"cond_stage_model.", -1},
    {"text_encoders.", -1},
    {"text_encoder.", -1},
    {"text_encoder_2.", -1},
    {"text_encoder_3.", -1},
    {"first_stage_model.", 1},
    {"vae.", 1},
    {"diffusion_model.", 0},
}};

[[nodiscard]] DDO_INLINE std::vector<table_component> split_components(const weight_table& table) {
  std::vector<table_component> parts;
  table_component rest;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::string& name = table[i].name;
    auto it = std::find_if(bundle_prefixes.begin(), bundle_prefixes.end(),
                           [&](const auto& b) { return name.starts_with(b.first); });
    if (it == bundle_prefixes.end()) {
      rest.weights.push_back(i);
      continue;
    }
    auto part = std::find_if(parts.begin(), parts.end(),
                             [&](const table_component& c) { return c.prefix == it->first; });
    if (part == parts.end()) {
      parts.push_back({std::string(it->first), {}, it->second});
      part = parts.end() - 1;
    }
    part->weights.push_back(i);
  }
  // One component (or none named): the table is the model. Several: the named diffusion model
  // is the main one, else the part with the most bytes; the unnamed rest belongs to the main.
  const bool bundled = parts.size() > 1 || (parts.size() == 1 && parts[0].place != 0);
  if (parts.empty() || (parts.size() == 1 && !bundled)) {
    table_component whole;
    for (std::size_t i = 0; i < table.size(); ++i) whole.weights.push_back(i);
    if (parts.size() == 1 && rest.weights.empty()) whole.prefix = parts[0].prefix;
    return {whole};
  }
  auto bytes = [&](const table_component& c) {
    std::uint64_t b = 0;
    for (std::size_t i : c.weights) b += table[i].bytes;
    return b;
  };
  auto main = std::find_if(parts.begin(), parts.end(),
                           [](const table_component& c) { return c.place == 0; });
  if (main == parts.end() && !rest.weights.empty()) {  // the unnamed weights are the model
    parts.push_back(std::move(rest));
    rest = {};
    main = parts.end() - 1;
  }
  if (main == parts.end())
    main = std::max_element(parts.begin(), parts.end(),
                            [&](const auto& a, const auto& b) { return bytes(a) < bytes(b); });
  main->place = 0;
  for (auto& c : parts)
    if (&c != &*main && c.place == 0) c.place = 1;
  main->weights.insert(main->weights.end(), rest.weights.begin(), rest.weights.end());
  std::sort(main->weights.begin(), main->weights.end());
  return parts;
}

/// One block of a component: its key and index, its weights, and where its family runs (the
/// sort key, the family's first appearance and family_rank).
struct found_block {
  std::string key;
  std::uint64_t index = 0;
  std::vector<std::size_t> weights;
  unsigned long order = 0;
  std::size_t family_seen = 0;
  int rank = 1;
};

/// The blocks of component @p part, in execution order, and which weights they hold.
struct component_blocks {
  std::vector<found_block> blocks;
  std::vector<char> in_block;                     ///< per table weight
  std::optional<std::size_t> first_block_weight;  ///< in table order
};

/// The blocks of @p part: by @p compiled patterns, or (none) by the auto rule's @p families of
/// the names stripped by @p strip. Explicit patterns state the order (a family's pattern); the
/// auto rule's is by stage: input stages, then middle or unknown, then output stages (a
/// "single_*" family right after its sibling: FLUX's double then single blocks). Then a
/// family's first appearance, then the block index.
[[nodiscard]] DDO_INLINE component_blocks find_blocks(const weight_table& table,
                                                      const table_component& part,
                                                      std::span<const pattern> compiled,
                                                      const std::vector<std::string>& families,
                                                      std::size_t strip) {
  component_blocks out;
  out.in_block.assign(table.size(), 0);
  std::unordered_map<std::string, std::size_t> block_of_key, family_seen;
  for (std::size_t i : part.weights) {
    const std::string& module_name = table[i].module_name;
    auto m =
        compiled.empty()
            ? match_family(module_name, module_name.starts_with(part.prefix) ? strip : 0, families)
            : match_pattern_block(module_name, compiled);
    if (!m) continue;
    if (!out.first_block_weight) out.first_block_weight = i;
    auto [it, inserted] = block_of_key.emplace(m->key, out.blocks.size());
    if (inserted) {
      const std::size_t seen = family_seen.emplace(m->family, family_seen.size()).first->second;
      const int rank = family_rank(m->family);
      const unsigned long order = compiled.empty()
                                      ? static_cast<unsigned long>(rank)
                                      : std::stoul(m->family.substr(0, m->family.find(':')));
      out.blocks.push_back(
          {std::move(m->key), m->index, {}, order, seen, rank});
    }
    out.blocks[it->second].weights.push_back(i);
    out.in_block[i] = 1;
  }
  std::stable_sort(out.blocks.begin(), out.blocks.end(), [](const auto& a, const auto& b) {
    return std::tie(a.order, a.family_seen, a.index) < std::tie(b.order, b.family_seen, b.index);
  });
  return out;
}

/// A unit inside a stage: one numbered child of it (`resnets.0`, `attentions.1`, ldm's `1`).
struct stage_child {
  std::string key;  ///< the name after the stage's prefix: "attentions.1", "1"
  std::string family;
  std::uint64_t index = 0;
  std::vector<std::size_t> weights;
  /// A container of layers (a module name goes on past the key: `resnets.0.conv1`), not a
  /// layer itself (Wan's `ffn.0`, ldm's `in_layers.2`).
  bool container = false;
  std::size_t seen = 0;  ///< first appearance among the stage's children
};

/// Where a child family runs among those of one index inside a stage (a UNet runs each
/// resnet before the attention of the same index): 0 convolutional (`res*`, `conv*`), 1 other,
/// 2 attention (`*attn*`, `*attention*`, `*transformer*`). Resamplers run after every index.
[[nodiscard]] DDO_INLINE int child_rank(std::string_view family) {
  if (family.find("sampl") != std::string_view::npos) return 3;
  if (family.starts_with("res") || family.starts_with("conv")) return 0;
  for (std::string_view n : {"attn", "attention", "transformer"})
    if (family.find(n) != std::string_view::npos) return 2;
  return 1;
}

/// Where the first numbered component of @p parts is (parts.size() when none).
[[nodiscard]] DDO_INLINE std::size_t first_index_at(const std::vector<std::string_view>& parts) {
  std::size_t j = 0;
  while (j < parts.size() && !parse_index(parts[j])) ++j;
  return j;
}

/// `parts[0] . ... . parts[j - 1]`.
[[nodiscard]] DDO_INLINE std::string join_parts(const std::vector<std::string_view>& parts,
                                                std::size_t j) {
  std::string out;
  for (std::size_t k = 0; k < j; ++k) {
    if (k != 0) out += '.';  // piece by piece: `"." + std::string` trips g++ 12 -Wrestrict
    out += parts[k];
  }
  return out;
}

/// The families deeper than one name below a stage (`model.transformer.resblocks` of a bundled
/// OpenCLIP, `transformer.text_model.encoder.layers` of a CLIP) that repeat a container of
/// layers at two indices or more: the stage's units at any depth (issue 38). A deep family that
/// does not (a feed-forward's `ff.net.0` and `ff.net.2`) stays inside its unit.
[[nodiscard]] DDO_INLINE std::unordered_set<std::string> deep_families(
    const weight_table& table, std::string_view prefix, std::span<const std::size_t> weights) {
  std::unordered_map<std::string, std::uint64_t> first;  // family: the index it was seen at
  std::unordered_set<std::string> repeated;
  for (std::size_t i : weights) {
    const std::string_view name = table[i].module_name;
    if (name.size() <= prefix.size()) continue;
    const auto parts = split_dots(name.substr(prefix.size() + 1));
    const std::size_t j = first_index_at(parts);
    if (j < 2 || j + 1 >= parts.size()) continue;  // shallow, unnumbered, or a layer
    const auto [it, added] = first.try_emplace(join_parts(parts, j), *parse_index(parts[j]));
    if (!added && it->second != *parse_index(parts[j])) repeated.insert(it->first);
  }
  return repeated;
}

/// The numbered children of the stage @p prefix (its weights @p weights): `N`, `family.N`, or a
/// deep family of deep_families; weights not in one go to @p front (input modules, anything
/// else) or @p back (output modules, by name).
[[nodiscard]] DDO_INLINE std::vector<stage_child> stage_children(
    const weight_table& table, std::string_view prefix, std::span<const std::size_t> weights,
    std::vector<std::size_t>& front, std::vector<std::size_t>& back) {
  const auto deep = deep_families(table, prefix, weights);
  std::vector<stage_child> children;
  std::unordered_map<std::string, std::size_t> child_of;
  for (std::size_t i : weights) {
    // Not called `module` (nvcc reads it at a line's start as the keyword: see match_family).
    const std::string_view name = table[i].module_name;
    const std::string_view rest =
        name.size() > prefix.size() ? name.substr(prefix.size() + 1) : std::string_view();
    const auto parts = split_dots(rest);
    const std::size_t j = first_index_at(parts);
    std::string family = j < parts.size() ? join_parts(parts, j) : std::string();
    if (j == parts.size() || (j >= 2 && !deep.contains(family))) {
      (is_output_component(parts[0]) ? back : front).push_back(i);
      continue;
    }
    const std::string key =
        family.empty() ? std::string(parts[j]) : family + "." + std::string(parts[j]);
    auto [it, inserted] = child_of.emplace(key, children.size());
    if (inserted)
      children.push_back({key, family, *parse_index(parts[j]), {}, false, children.size()});
    auto& child = children[it->second];
    child.container = child.container || parts.size() > j + 1;
    child.weights.push_back(i);
  }
  return children;
}

/// A block split into the finest repeated units that run in order (docs/planning.md,
/// "Execution groups"): a stage whose numbered children include a container of layers (a
/// UNet's resnets and attentions, an attention's transformer blocks, ldm's numbered layers) is
/// its children, each split the same way, in execution order; a block whose numbered children
/// are single layers (Wan's `ffn.0`, FLUX's `img_mlp.2`) stays whole, and so does a stage whose
/// one child does not split. The stage's other weights join its first unit (input modules, and
/// any other) or its last (output modules: `proj_out`, `norm`).
[[nodiscard]] DDO_INLINE std::vector<execution_group> split_stage(
    const weight_table& table, const std::string& prefix, std::vector<std::size_t> weights) {
  std::vector<std::size_t> front, back;
  auto children = stage_children(table, prefix, weights, front, back);
  const bool composite = std::any_of(children.begin(), children.end(),
                                     [](const stage_child& c) { return c.container; });
  if (children.empty() || !composite) return {execution_group{prefix, std::move(weights), true}};
  std::stable_sort(children.begin(), children.end(), [](const auto& a, const auto& b) {
    const int ra = child_rank(a.family), rb = child_rank(b.family);
    if ((ra == 3) != (rb == 3)) return rb == 3;
    return std::tie(a.index, ra, a.seen) < std::tie(b.index, rb, b.seen);
  });
  std::vector<execution_group> units;
  for (auto& c : children) {
    auto sub = split_stage(table, prefix + "." + c.key, std::move(c.weights));
    units.insert(units.end(), std::make_move_iterator(sub.begin()),
                 std::make_move_iterator(sub.end()));
  }
  if (units.size() == 1) return {execution_group{prefix, std::move(weights), true}};
  auto& first = units.front().weights;
  first.insert(first.end(), front.begin(), front.end());
  std::sort(first.begin(), first.end());
  auto& last = units.back().weights;
  last.insert(last.end(), back.begin(), back.end());
  std::sort(last.begin(), last.end());
  return units;
}

/// Appends block @p name (its weights @p weights) to @p groups: split into its units when the
/// auto rule found it (@p descend), whole otherwise (a stated order names its own units).
DDO_INLINE void add_block(std::vector<execution_group>& groups, const weight_table& table,
                          std::string name, std::vector<std::size_t> weights, bool is_block,
                          bool descend) {
  if (!descend) {
    groups.push_back(execution_group{std::move(name), std::move(weights), is_block});
    return;
  }
  for (auto& unit : split_stage(table, name, std::move(weights))) {
    unit.is_block = is_block;
    groups.push_back(std::move(unit));
  }
}

/// The groups of one component (see model/execution_groups.hpp).
[[nodiscard]] DDO_INLINE std::vector<execution_group> component_groups(
    const weight_table& table, const table_component& part, std::span<const pattern> compiled,
    bool blocks) {
  const std::size_t strip =
      std::all_of(part.weights.begin(), part.weights.end(),
                  [&](std::size_t i) { return table[i].module_name.starts_with(part.prefix); })
          ? part.prefix.size()
          : 0;
  const bool use_auto = compiled.empty() || !blocks;
  auto [found, in_block, first_block_weight] =
      use_auto
          ? find_blocks(table, part, {}, choose_block_families(table, part.weights, strip), strip)
          : find_blocks(table, part, compiled, {}, strip);
  const std::string label =
      part.prefix.empty() ? std::string() : part.prefix.substr(0, part.prefix.size() - 1);
  std::vector<execution_group> groups;
  if (found.empty()) {
    if (!label.empty()) return {execution_group{label, part.weights, false}};
    std::unordered_map<std::string, std::size_t> group_of_top;
    for (std::size_t i : part.weights) {
      const std::string& name = table[i].name;
      const std::string top = name.substr(0, name.find('.'));
      auto [it, inserted] = group_of_top.emplace(top, groups.size());
      if (inserted) groups.push_back(execution_group{top, {}, false});
      groups[it->second].weights.push_back(i);
    }
    return groups;
  }
  // Outside the blocks: input modules before, output modules after, a middle stage between the
  // input and the output stages; anything else by its table position against the first block
  // weight (an engine's table lists modules in order; a file's names are sorted, hence the
  // name rules first).
  execution_group before{label.empty() ? "<before>" : label + ".<before>", {}, false};
  execution_group after{label.empty() ? "<after>" : label + ".<after>", {}, false};
  std::map<std::string, execution_group> middles;
  for (std::size_t i : part.weights) {
    if (in_block[i]) continue;
    const std::string& module_name = table[i].module_name;
    const std::string_view module =
        std::string_view(module_name).substr(module_name.starts_with(part.prefix) ? strip : 0);
    const std::string_view top = module.substr(0, module.find('.'));
    if (is_middle_component(top)) {
      auto& g = middles[std::string(module_name.substr(0, module_name.size() - module.size())) +
                        std::string(top)];
      g.weights.push_back(i);
      continue;
    }
    // The top-level module decides first, then any component of the name, then the position.
    const bool input = !is_output_component(top) &&
                       (is_input_component(top) ||
                        (!has_component(module, is_output_component) &&
                         (has_component(module, is_input_component) || i < *first_block_weight)));
    (input ? before : after).weights.push_back(i);
  }
  // A middle stage runs before the first output-stage block; in a stated order (explicit
  // patterns), right after the last input-stage block when there is one.
  std::optional<std::size_t> middle_at;
  for (std::size_t b = 0; b < found.size(); ++b)
    if (!use_auto && found[b].rank == 0) middle_at = b + 1;
  for (std::size_t b = 0; b < found.size() && !middle_at; ++b)
    if (found[b].rank == 2) middle_at = b;
  if (!before.weights.empty()) groups.push_back(std::move(before));
  for (std::size_t b = 0; b <= found.size(); ++b) {
    if (b == middle_at.value_or(found.size()))
      for (auto& [name, g] : middles)
        add_block(groups, table, name, std::move(g.weights), blocks, use_auto);
    if (b < found.size())
      add_block(groups, table, std::move(found[b].key), std::move(found[b].weights), blocks,
                use_auto);
  }
  if (!after.weights.empty()) groups.push_back(std::move(after));
  return groups;
}

}  // namespace detail

DDO_INLINE std::vector<pattern> compile_block_patterns(std::span<const std::string> patterns) {
  std::vector<pattern> compiled;
  if (patterns.empty() || (patterns.size() == 1 && patterns[0] == "auto")) return compiled;
  compiled.reserve(patterns.size());
  for (const auto& p : patterns) {
    if (p == "auto")
      throw config_error(origin::config, "resident_module_patterns",
                         "resident_module_patterns: 'auto' must be the only entry, found it "
                         "together with explicit patterns");
    try {
      compiled.emplace_back(p);
    } catch (const pattern_error& e) {
      throw config_error(
          origin::config, "resident_module_patterns",
          "resident_module_patterns: '" + p + "' is not a valid regular expression: " + e.what());
    }
  }
  return compiled;
}

DDO_INLINE std::vector<execution_group> infer_execution_groups(
    const weight_table& table, std::span<const std::string> patterns) {
  const std::vector<pattern> compiled = compile_block_patterns(patterns);
  return infer_execution_groups(table, std::span<const pattern>(compiled));
}

DDO_INLINE std::vector<execution_group> infer_execution_groups(const weight_table& table,
                                                               std::span<const pattern> compiled) {
  auto parts = detail::split_components(table);
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& a, const auto& b) { return a.place < b.place; });
  std::vector<execution_group> groups;
  for (const auto& part : parts) {
    auto g = detail::component_groups(table, part, compiled, part.place == 0);
    groups.insert(groups.end(), std::make_move_iterator(g.begin()),
                  std::make_move_iterator(g.end()));
  }
  return groups;
}

DDO_INLINE std::vector<execution_group> validate_execution_groups(
    const weight_table& table, std::vector<execution_group> groups) {
  std::vector<std::size_t> owner(table.size(), SIZE_MAX);
  std::unordered_map<std::string, std::size_t> names;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    DDO_EXPECTS(!groups[g].name.empty(),
                "execution groups: group #" + std::to_string(g) + " has no name");
    DDO_EXPECTS(names.emplace(groups[g].name, g).second,
                "execution groups: the name '" + groups[g].name + "' is used by two groups");
    for (std::size_t w : groups[g].weights) {
      DDO_EXPECTS(w < table.size(), "execution groups: group '" + groups[g].name +
                                        "' names weight index " + std::to_string(w) +
                                        " but the table has " + std::to_string(table.size()));
      DDO_EXPECTS(owner[w] == SIZE_MAX,
                  "execution groups: weight '" + table[w].name + "' is in group '" +
                      groups[g].name + "' and in group '" +
                      (owner[w] == SIZE_MAX ? std::string() : groups[owner[w]].name) + "'");
      owner[w] = g;
    }
    std::sort(groups[g].weights.begin(), groups[g].weights.end());
  }
  for (std::size_t w = 0; w < table.size(); ++w)
    DDO_EXPECTS(owner[w] != SIZE_MAX,
                "execution groups: weight '" + table[w].name + "' is in no group");
  return groups;
}

DDO_INLINE std::vector<std::size_t> group_of_weights(const weight_table& table,
                                                     std::span<const execution_group> groups) {
  std::vector<std::size_t> owner(table.size(), SIZE_MAX);
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::size_t w : groups[g].weights)
      if (w < owner.size()) owner[w] = g;
  return owner;
}

}  // namespace v0
}  // namespace ddo
