// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Printing a plan: the human summary (the reference's "profile summary") and the
/// machine-readable TOML and JSON forms.
///
/// The TOML and JSON forms carry the same fields: a `summary` table, a `budgets` table, one
/// `groups` entry per execution group (in execution order) and one `weights` entry per weight
/// (in table order). Sizes are bytes (integers); names are the table's.

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/enum_names.hpp"
#include "ddo/core/units.hpp"
#include "ddo/core/detail/json.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/plan/plan.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The output forms of a plan.
enum class plan_format { text, toml, json };

/// @brief The human summary: machine, budgets, bytes per placement, the largest streamed group,
/// a line per group and the count of weights per reason.
[[nodiscard]] inline std::string format_plan_summary(const offload_plan& plan,
                                                     const weight_table& table);
/// @brief The plan as a TOML document.
[[nodiscard]] inline std::string format_plan_toml(const offload_plan& plan,
                                                  const weight_table& table);
/// @brief The plan as a JSON document.
[[nodiscard]] inline std::string format_plan_json(const offload_plan& plan,
                                                  const weight_table& table);
/// @brief One of the three forms.
[[nodiscard]] inline std::string format_plan(const offload_plan& plan, const weight_table& table,
                                             plan_format form) {
  switch (form) {
    case plan_format::toml:
      return format_plan_toml(plan, table);
    case plan_format::json:
      return format_plan_json(plan, table);
    case plan_format::text:
      break;
  }
  return format_plan_summary(plan, table);
}

namespace detail {

// C varargs with the printf format attribute, so that g++ and clang check every call's
// arguments against its (literal) format.
__attribute__((format(printf, 2, 3))) inline void plan_appendf(std::string& out, const char* format,
                                                               ...) {
  char buffer[512];
  std::va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  if (n > 0) out.append(buffer, static_cast<std::size_t>(std::min<int>(n, sizeof buffer - 1)));
}

[[nodiscard]] inline std::string cut_text(std::string_view s, std::size_t width) {
  if (s.size() <= width) return std::string(s);
  return std::string(s.substr(0, width - 3)) + "...";
}

/// Key-value pairs shared by the TOML and JSON forms: (key, already-encoded value).
using encoded_fields = std::vector<std::pair<std::string, std::string>>;

[[nodiscard]] inline encoded_fields summary_fields(const offload_plan& plan,
                                                   const weight_table& table) {
  encoded_fields f;
  f.emplace_back("weights", std::to_string(table.size()));
  f.emplace_back("groups", std::to_string(plan.groups.size()));
  f.emplace_back("total_bytes", std::to_string(table.total_bytes()));
  for (std::size_t p = 0; p < placement_count; ++p)
    f.emplace_back(std::string(to_string(static_cast<placement>(p))) + "_bytes",
                   std::to_string(plan.total_bytes(static_cast<placement>(p))));
  f.emplace_back("largest_streamed_group_bytes",
                 std::to_string(plan.largest_streamed_group_bytes()));
  return f;
}

// A budget's selection by name; "" for route plans, which select nothing.
[[nodiscard]] constexpr std::string_view selection_text(plan_selection which) noexcept {
  return enum_name(which);
}

[[nodiscard]] inline encoded_fields budget_fields(const plan_budgets& b) {
  auto q = [](std::string_view s) { return json_quote(s); };
  encoded_fields f;
  f.emplace_back("resident_budget_bytes", std::to_string(b.resident_budget_bytes));
  f.emplace_back("resident_budget_source", q(to_string(b.resident_source)));
  f.emplace_back("resident_budget_detail", q(b.resident_budget_detail));
  f.emplace_back("resident_selection", q(selection_text(b.resident_selection)));
  f.emplace_back("pin_budget_bytes", std::to_string(b.pin_budget_bytes));
  f.emplace_back("pin_budget_source", q(to_string(b.pin_source)));
  f.emplace_back("pin_budget_detail", q(b.pin_budget_detail));
  f.emplace_back("pin_selection", q(selection_text(b.pin_selection)));
  f.emplace_back("full_pin_zero_resident", b.full_pin_zero_resident ? "true" : "false");
  f.emplace_back("free_vram_bytes", std::to_string(b.free_vram_bytes));
  f.emplace_back("total_vram_bytes", std::to_string(b.total_vram_bytes));
  f.emplace_back("available_ram_bytes", std::to_string(b.available_ram_bytes));
  f.emplace_back("usable_ram_bytes", std::to_string(b.usable_ram_bytes));
  f.emplace_back("max_group_bytes", std::to_string(b.max_group_bytes));
  f.emplace_back("max_group_detail", q(b.max_group_detail));
  f.emplace_back("rule_resident_bytes", std::to_string(b.rule_resident_bytes));
  f.emplace_back("demoted_bytes", std::to_string(b.demoted_bytes));
  f.emplace_back("demoted_weights", std::to_string(b.demoted_weights));
  f.emplace_back("rule_resident_detail", q(b.rule_resident_detail));
  f.emplace_back("tier_bound_detail", q(b.tier_bound_detail));
  return f;
}

[[nodiscard]] inline encoded_fields group_fields(const plan_group& g) {
  encoded_fields f;
  f.emplace_back("name", json_quote(g.name));
  f.emplace_back("weights", std::to_string(g.weights.size()));
  for (std::size_t p = 0; p < placement_count; ++p)
    f.emplace_back(std::string(to_string(static_cast<placement>(p))) + "_bytes",
                   std::to_string(g.bytes_by_placement[p]));
  f.emplace_back("streamed_bytes", std::to_string(g.streamed_bytes()));
  return f;
}

[[nodiscard]] inline encoded_fields weight_fields(const offload_plan& plan,
                                                  const weight_table& table, std::size_t i) {
  const weight_info& w = table[i];
  const weight_decision& d = plan.decisions[i];
  std::string shape = "[";
  for (std::size_t k = 0; k < w.shape.size(); ++k)
    shape += (k ? ", " : "") + std::to_string(w.shape[k]);
  shape += "]";
  encoded_fields f;
  f.emplace_back("name", json_quote(w.name));
  f.emplace_back("module", json_quote(w.module_name));
  f.emplace_back("kind", json_quote(to_string(w.kind)));
  f.emplace_back("dtype", json_quote(to_string(w.type)));
  f.emplace_back("shape", shape);
  f.emplace_back("bytes", std::to_string(w.bytes));
  f.emplace_back("group",
                 json_quote(d.group < plan.groups.size() ? plan.groups[d.group].name : ""));
  f.emplace_back("placement", json_quote(to_string(d.where)));
  f.emplace_back("reason", json_quote(d.reason));
  return f;
}

}  // namespace detail

inline std::string format_plan_summary(const offload_plan& plan, const weight_table& table) {
  using detail::plan_appendf;
  const plan_budgets& b = plan.budgets;
  std::string out;
  plan_appendf(out, "ddo offload plan: %zu weights, %s in %zu execution groups\n", table.size(),
               format_bytes(table.total_bytes()).c_str(), plan.groups.size());
  plan_appendf(out, "  machine: free VRAM %s of %s; RAM available %s, usable %s\n",
               b.free_vram_bytes ? format_bytes(b.free_vram_bytes).c_str() : "unknown",
               b.total_vram_bytes ? format_bytes(b.total_vram_bytes).c_str() : "unknown",
               format_bytes(b.available_ram_bytes).c_str(),
               format_bytes(b.usable_ram_bytes).c_str());
  plan_appendf(out, "  resident budget: %s [%s, selection %s] %s\n",
               format_bytes(b.resident_budget_bytes).c_str(),
               std::string(to_string(b.resident_source)).c_str(),
               std::string(detail::selection_text(b.resident_selection)).c_str(),
               b.resident_budget_detail.c_str());
  plan_appendf(out, "  pin budget: %s [%s, selection %s] %s\n",
               format_bytes(b.pin_budget_bytes).c_str(),
               std::string(to_string(b.pin_source)).c_str(),
               std::string(detail::selection_text(b.pin_selection)).c_str(),
               b.pin_budget_detail.c_str());
  plan_appendf(out, "  full-pin zero-resident: %s\n", b.full_pin_zero_resident ? "yes" : "no");
  if (!b.rule_resident_detail.empty()) out += "  rules: " + b.rule_resident_detail + "\n";

  std::array<std::size_t, placement_count> counts{};
  for (const auto& d : plan.decisions) ++counts[static_cast<std::size_t>(d.where)];
  plan_appendf(out, "  %-16s %8s %14s\n", "placement", "weights", "bytes");
  for (std::size_t p = 0; p < placement_count; ++p)
    plan_appendf(out, "  %-16s %8zu %14s\n",
                 std::string(to_string(static_cast<placement>(p))).c_str(), counts[p],
                 format_bytes(plan.total_bytes(static_cast<placement>(p))).c_str());

  std::size_t largest = 0;
  for (std::size_t g = 1; g < plan.groups.size(); ++g)
    if (plan.groups[g].streamed_bytes() > plan.groups[largest].streamed_bytes()) largest = g;
  if (!plan.groups.empty())
    plan_appendf(out, "  largest streamed group: %s (%s); transport slot limit: %s\n",
                 plan.groups[largest].name.c_str(),
                 format_bytes(plan.groups[largest].streamed_bytes()).c_str(),
                 b.max_group_bytes ? format_bytes(b.max_group_bytes).c_str() : "none");
  if (!b.max_group_detail.empty()) out += "  transport slot: " + b.max_group_detail + "\n";
  if (!b.tier_bound_detail.empty()) out += "  tiers: " + b.tier_bound_detail + "\n";

  plan_appendf(out, "  groups in execution order:\n  %-34s %7s %12s %12s %12s %12s\n", "group",
               "weights", "resident", "pinned", "pageable", "file");
  for (const auto& g : plan.groups)
    plan_appendf(out, "  %-34s %7zu %12s %12s %12s %12s\n", detail::cut_text(g.name, 34).c_str(),
                 g.weights.size(), format_bytes(g.bytes(placement::gpu_resident)).c_str(),
                 format_bytes(g.bytes(placement::pinned_host)).c_str(),
                 format_bytes(g.bytes(placement::pageable_host)).c_str(),
                 format_bytes(g.bytes(placement::file)).c_str());

  std::map<std::string, std::pair<std::size_t, std::uint64_t>> by_reason;
  for (std::size_t i = 0; i < plan.decisions.size() && i < table.size(); ++i) {
    auto& [count, bytes] = by_reason[plan.decisions[i].reason];
    ++count;
    bytes += table[i].bytes;
  }
  plan_appendf(out, "  reasons:\n");
  for (const auto& [reason, cb] : by_reason)
    plan_appendf(out, "  %7zu weights %12s  %s\n", cb.first, format_bytes(cb.second).c_str(),
                 reason.c_str());
  return out;
}

inline std::string format_plan_toml(const offload_plan& plan, const weight_table& table) {
  std::string out = "# ddo offload plan\n";
  auto table_out = [&](std::string_view header, const detail::encoded_fields& fields) {
    out += header;
    out += '\n';
    for (const auto& [k, v] : fields) out += k + " = " + v + "\n";
  };
  table_out("[summary]", detail::summary_fields(plan, table));
  out += '\n';
  table_out("[budgets]", detail::budget_fields(plan.budgets));
  for (const auto& g : plan.groups) {
    out += '\n';
    table_out("[[groups]]", detail::group_fields(g));
  }
  for (std::size_t i = 0; i < table.size() && i < plan.decisions.size(); ++i) {
    out += '\n';
    table_out("[[weights]]", detail::weight_fields(plan, table, i));
  }
  return out;
}

inline std::string format_plan_json(const offload_plan& plan, const weight_table& table) {
  json_writer out;
  auto object = [&out](const detail::encoded_fields& fields) {
    out.begin_object(json_layout::lines);
    for (const auto& [key, value] : fields) out.key(key).encoded(value);
    out.end_object();
  };
  out.begin_object(json_layout::lines);
  out.key("summary");
  object(detail::summary_fields(plan, table));
  out.key("budgets");
  object(detail::budget_fields(plan.budgets));
  out.key("groups").begin_array(json_layout::lines);
  for (const auto& g : plan.groups) object(detail::group_fields(g));
  out.end_array().key("weights").begin_array(json_layout::lines);
  for (std::size_t i = 0; i < table.size() && i < plan.decisions.size(); ++i)
    object(detail::weight_fields(plan, table, i));
  out.end_array().end_object();
  return out.take() + "\n";
}

}  // namespace v0
}  // namespace ddo
