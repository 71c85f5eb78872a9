// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of execution-group inference (model/execution_groups.hpp).

#include <unordered_map>

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
    for (std::size_t j = 0; j <= i; ++j) m.family += (j ? "." : "") + std::string(parts[j]);
    m.key = m.family + "." + std::string(parts[i + 1]);
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
    b.family = std::to_string(p) + ":" +
               module_name.substr(0, m->position + d_begin);
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
  for (std::string_view n : {"norm_out", "proj_out", "conv_out", "final_layer", "lm_head", "ln_f",
                             "norm_f", "head", "output"})
    if (c == n) return true;
  return false;
}

[[nodiscard]] DDO_INLINE bool is_input_component(std::string_view c) {
  if (c.find("embed") != std::string_view::npos) return true;
  for (std::string_view n :
       {"img_in", "txt_in", "conv_in", "proj_in", "time_in", "vector_in", "guidance_in", "input"})
    if (c == n) return true;
  return false;
}

}  // namespace detail

DDO_INLINE std::vector<pattern> compile_block_patterns(std::span<const std::string> patterns) {
  std::vector<pattern> compiled;
  if (patterns.empty() || (patterns.size() == 1 && patterns[0] == "auto")) return compiled;
  compiled.reserve(patterns.size());
  for (const auto& p : patterns) {
    if (p == "auto")
      throw config_error("config", "resident_module_patterns",
                         "resident_module_patterns: 'auto' must be the only entry, found it "
                         "together with explicit patterns");
    try {
      compiled.emplace_back(p);
    } catch (const pattern_error& e) {
      throw config_error("config", "resident_module_patterns",
                         "resident_module_patterns: '" + p +
                             "' is not a valid regular expression: " + e.what());
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
  const bool use_auto = compiled.empty();

  struct block_info {
    std::string key;
    std::string family;
    std::uint64_t index;
    std::vector<std::size_t> weights;
  };
  std::vector<std::string> family_order;  // first appearance
  std::unordered_map<std::string, std::size_t> block_of_key;
  std::vector<block_info> blocks;
  std::vector<std::optional<std::size_t>> block_of(table.size());
  std::optional<std::size_t> first_block_weight;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::string& module_name = table[i].module_name;
    const auto m =
        use_auto ? detail::match_auto_block(module_name) : detail::match_pattern_block(module_name, compiled);
    if (!m) continue;
    if (!first_block_weight) first_block_weight = i;
    auto [it, inserted] = block_of_key.emplace(m->key, blocks.size());
    if (inserted) {
      blocks.push_back(block_info{m->key, m->family, m->index, {}});
      if (std::find(family_order.begin(), family_order.end(), m->family) == family_order.end())
        family_order.push_back(m->family);
    }
    blocks[it->second].weights.push_back(i);
    block_of[i] = it->second;
  }

  // "single_*" families run right after their sibling family.
  auto leaf_of = [](const std::string& family) {
    const auto dot = family.rfind('.');
    const auto colon = family.rfind(':');
    std::size_t start = 0;
    if (dot != std::string::npos)
      start = dot + 1;
    else if (colon != std::string::npos)
      start = colon + 1;
    return std::pair{family.substr(0, start), family.substr(start)};
  };
  for (std::size_t f = 0; f < family_order.size(); ++f) {
    const auto [prefix, leaf] = leaf_of(family_order[f]);
    if (!leaf.starts_with("single_")) continue;
    const std::string rest = leaf.substr(7);
    for (std::size_t g = f + 1; g < family_order.size(); ++g) {
      const auto [prefix2, leaf2] = leaf_of(family_order[g]);
      if (prefix2 == prefix && (leaf2 == rest || leaf2 == "double_" + rest)) {
        const std::string single = family_order[f];
        family_order.erase(family_order.begin() + static_cast<std::ptrdiff_t>(f));
        family_order.insert(family_order.begin() + static_cast<std::ptrdiff_t>(g), single);
        --f;  // the entry now at f has not been looked at
        break;
      }
    }
  }

  std::vector<execution_group> groups;
  if (blocks.empty()) {
    std::unordered_map<std::string, std::size_t> group_of_top;
    for (std::size_t i = 0; i < table.size(); ++i) {
      const std::string& name = table[i].name;
      const std::string top = name.substr(0, name.find('.'));
      auto [it, inserted] = group_of_top.emplace(top, groups.size());
      if (inserted) groups.push_back(execution_group{top, {}, false});
      groups[it->second].weights.push_back(i);
    }
    return groups;
  }

  execution_group before{"<before>", {}, false};
  execution_group after{"<after>", {}, false};
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (block_of[i]) continue;
    const std::string& module_name = table[i].module_name;
    if (detail::has_component(module_name, detail::is_output_component))
      after.weights.push_back(i);
    else if (detail::has_component(module_name, detail::is_input_component))
      before.weights.push_back(i);
    else if (i < *first_block_weight)
      before.weights.push_back(i);
    else
      after.weights.push_back(i);
  }

  if (!before.weights.empty()) groups.push_back(std::move(before));
  for (const auto& family : family_order) {
    std::vector<std::size_t> members;
    for (std::size_t b = 0; b < blocks.size(); ++b)
      if (blocks[b].family == family) members.push_back(b);
    // Two keys with one index (an explicit pattern's odd match) keep first appearance: sorted
    // by (index, position), as a stable sort would, without its merge machinery to compile.
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
      return blocks[a].index != blocks[b].index ? blocks[a].index < blocks[b].index : a < b;
    });
    for (std::size_t b : members)
      groups.push_back(execution_group{blocks[b].key, blocks[b].weights, true});
  }
  if (!after.weights.empty()) groups.push_back(std::move(after));
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
