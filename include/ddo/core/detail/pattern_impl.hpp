// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of ddo::pattern (core/pattern.hpp): a parser to a small syntax tree, a
/// compiler to Pike VM instructions, and the VM.

// Part of ddo/core/pattern.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

/// Limits that keep compilation bounded: nesting of groups (the parser recurses on it, never on
/// the subject), repetition counts and the size of the expanded program.
inline constexpr std::size_t pattern_max_depth = 200;
inline constexpr std::uint32_t pattern_max_repeat = 1000;
inline constexpr std::size_t pattern_max_program = 50000;
inline constexpr std::uint32_t pattern_unbounded = 0xffffffffu;

[[nodiscard]] DDO_INLINE bool is_word_byte(unsigned char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

struct pattern_compiler {
  enum class kind : std::uint8_t { empty, byte, any, set, begin, end, wordb, not_wordb, concat,
                                   alternation, repeat };
  struct node {
    kind k = kind::empty;
    std::uint8_t value = 0;
    std::uint32_t set = 0;
    std::uint32_t min = 0;
    std::uint32_t max = 0;
    bool greedy = true;
    std::vector<std::uint32_t> children;
  };

  const std::string& text;
  std::size_t pos = 0;
  std::vector<node> nodes;
  std::vector<byte_class>& classes;
  std::vector<pattern_instruction>& program;

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw pattern_error(text, at,
                        "pattern '" + text + "': " + what + " at offset " + std::to_string(at) +
                            " (ddo accepts ECMAScript regular expressions without backreferences, "
                            "lookaround, named groups or flags; see docs/planning.md)");
  }

  std::uint32_t add(node n) {
    nodes.push_back(std::move(n));
    return static_cast<std::uint32_t>(nodes.size() - 1);
  }
  std::uint32_t add_class(const byte_class& c) {
    classes.push_back(c);
    return static_cast<std::uint32_t>(classes.size() - 1);
  }
  [[nodiscard]] bool at_end() const noexcept { return pos >= text.size(); }
  [[nodiscard]] char peek() const noexcept { return text[pos]; }

  static void add_named_class(byte_class& c, char letter) {
    for (int b = 0; b < 256; ++b) {
      const auto u = static_cast<unsigned char>(b);
      bool in = false;
      switch (letter | 0x20) {
        case 'd': in = u >= '0' && u <= '9'; break;
        case 'w': in = is_word_byte(u); break;
        case 's': in = u == ' ' || (u >= '\t' && u <= '\r'); break;
        default: break;
      }
      if (letter >= 'A' && letter <= 'Z') in = !in;
      if (in) c.add(u);
    }
  }

  int hex_digits(std::size_t count, std::size_t escape_at) {
    int value = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (at_end()) fail(escape_at, "incomplete hexadecimal escape");
      const char h = text[pos++];
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) fail(escape_at, "invalid hexadecimal escape");
      value = value * 16 + d;
    }
    return value;
  }

  /// An escape after '\' (pos at the character after it). Returns a byte, or -1 with @p set
  /// filled for \d \w \s and their negations. @p in_class: \b is backspace, \B an error.
  int escape(byte_class& set, bool in_class, std::size_t escape_at) {
    if (at_end()) fail(escape_at, "'\\' at the end of the pattern");
    const char c = text[pos++];
    switch (c) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        add_named_class(set, c);
        return -1;
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0':
        if (!at_end() && peek() >= '0' && peek() <= '9')
          fail(escape_at, "octal escape '\\0" + std::string(1, peek()) + "' (not supported)");
        return 0;
      case 'x': return hex_digits(2, escape_at);
      case 'u': {
        const int v = hex_digits(4, escape_at);
        if (v > 0xff) fail(escape_at, "'\\u' escape above 00FF (names are matched byte by byte)");
        return v;
      }
      case 'b':
        if (in_class) return '\b';
        break;
      case 'c': fail(escape_at, "control escape '\\c' (not supported)");
      case 'k': fail(escape_at, "named backreference '\\k' (not supported: not a regular expression)");
      case 'p': case 'P': fail(escape_at, "Unicode property escape '\\" + std::string(1, c) + "' (not supported)");
      default: break;
    }
    if (c >= '1' && c <= '9')
      fail(escape_at, "backreference '\\" + std::string(1, c) +
                          "' (not supported: not a regular expression)");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      fail(escape_at, "unknown escape '\\" + std::string(1, c) + "'");
    return static_cast<unsigned char>(c);
  }

  std::uint32_t parse_class() {
    const std::size_t open = pos++;  // '['
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos;
    }
    // ECMAScript reads "[]" as an empty class, Python's re (the reference's) as a class holding
    // ']': refuse the ambiguity rather than guess.
    if (!at_end() && peek() == ']')
      fail(pos, "']' first in a character class (ambiguous across dialects: write '\\]')");
    byte_class set;
    // One class atom: a byte (>= 0) or a named class (-1, merged into set).
    auto atom = [&]() -> int {
      const std::size_t at = pos;
      const char c = text[pos++];
      if (c != '\\') return static_cast<unsigned char>(c);
      byte_class named;
      const int b = escape(named, true, at);
      if (b < 0)
        for (int i = 0; i < 4; ++i) set.bits[i] |= named.bits[i];
      return b;
    };
    for (;;) {
      if (at_end()) fail(open, "'[' without a closing ']'");
      if (peek() == ']') {
        ++pos;
        break;
      }
      const std::size_t at = pos;
      const int lo = atom();
      if (!at_end() && peek() == '-' && pos + 1 < text.size() && text[pos + 1] != ']') {
        ++pos;  // '-'
        const int hi = atom();
        if (lo < 0 || hi < 0) fail(at, "a class like \\d or \\w as a range bound");
        if (lo > hi) fail(at, "range out of order in character class");
        for (int b = lo; b <= hi; ++b) set.add(static_cast<unsigned char>(b));
      } else if (lo >= 0) {
        set.add(static_cast<unsigned char>(lo));
      }
    }
    if (negate)
      for (auto& w : set.bits) w = ~w;
    node n;
    n.k = kind::set;
    n.set = add_class(set);
    return add(std::move(n));
  }

  std::uint32_t parse_atom(std::size_t depth) {
    const std::size_t at = pos;
    const char c = text[pos];
    node n;
    switch (c) {
      case '(': {
        ++pos;
        if (!at_end() && peek() == '?') {
          const std::string_view rest = std::string_view(text).substr(pos);
          if (rest.starts_with("?:")) {
            pos += 2;
          } else if (rest.starts_with("?=") || rest.starts_with("?!")) {
            fail(at, "lookahead '(" + std::string(rest.substr(0, 2)) + "' (not supported)");
          } else if (rest.starts_with("?<=") || rest.starts_with("?<!")) {
            fail(at, "lookbehind '(" + std::string(rest.substr(0, 3)) + "' (not supported)");
          } else if (rest.starts_with("?<")) {
            fail(at, "named group '(?<' (not supported; use '(?:' or '(')");
          } else {
            fail(at, "group syntax '(?" + std::string(rest.substr(1, 1)) +
                         "' (only '(?:' is supported; inline flags are not)");
          }
        }
        if (depth + 1 > pattern_max_depth)
          fail(at, "groups nested deeper than " + std::to_string(pattern_max_depth));
        const std::uint32_t inner = parse_alternation(depth + 1);
        if (at_end() || peek() != ')') fail(at, "'(' without a closing ')'");
        ++pos;
        return inner;
      }
      case ')': fail(at, "')' without an opening '('");
      case '[': return parse_class();
      case '*': case '+': case '?': fail(at, "quantifier '" + std::string(1, c) + "' with nothing to repeat");
      case '{': fail(at, "'{' that does not start a repetition {m}, {m,} or {m,n} (escape it: '\\{')");
      case '.': ++pos; n.k = kind::any; return add(std::move(n));
      case '^': ++pos; n.k = kind::begin; return add(std::move(n));
      case '$': ++pos; n.k = kind::end; return add(std::move(n));
      case '\\': {
        ++pos;
        if (!at_end() && (peek() == 'b' || peek() == 'B')) {
          n.k = peek() == 'b' ? kind::wordb : kind::not_wordb;
          ++pos;
          return add(std::move(n));
        }
        byte_class set;
        const int b = escape(set, false, at);
        if (b < 0) {
          n.k = kind::set;
          n.set = add_class(set);
        } else {
          n.k = kind::byte;
          n.value = static_cast<std::uint8_t>(b);
        }
        return add(std::move(n));
      }
      default:
        ++pos;
        n.k = kind::byte;
        n.value = static_cast<std::uint8_t>(c);
        return add(std::move(n));
    }
  }

  /// Reads {m}, {m,} or {m,n} at pos; false (pos unchanged) if the text there is not one.
  bool parse_braces(std::uint32_t& min, std::uint32_t& max) {
    std::size_t p = pos + 1;
    auto number = [&](std::uint32_t& out) {
      const std::size_t start = p;
      std::uint64_t v = 0;
      while (p < text.size() && text[p] >= '0' && text[p] <= '9') {
        v = v * 10 + static_cast<std::uint64_t>(text[p] - '0');
        if (v > pattern_max_repeat)
          fail(pos, "repetition count above " + std::to_string(pattern_max_repeat));
        ++p;
      }
      out = static_cast<std::uint32_t>(v);
      return p > start;
    };
    if (!number(min)) return false;
    max = min;
    if (p < text.size() && text[p] == ',') {
      ++p;
      if (!number(max)) max = pattern_unbounded;
    }
    if (p >= text.size() || text[p] != '}') return false;
    if (max < min) fail(pos, "repetition {m,n} with n < m");
    pos = p + 1;
    return true;
  }

  std::uint32_t parse_sequence(std::size_t depth) {
    node seq;
    seq.k = kind::concat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      std::uint32_t atom = parse_atom(depth);
      const kind atom_kind = nodes[atom].k;
      bool quantified = false;
      while (!at_end()) {
        const std::size_t at = pos;
        std::uint32_t min = 0;
        std::uint32_t max = 0;
        const char q = peek();
        if (q == '*') {
          min = 0, max = pattern_unbounded, ++pos;
        } else if (q == '+') {
          min = 1, max = pattern_unbounded, ++pos;
        } else if (q == '?') {
          min = 0, max = 1, ++pos;
        } else if (q == '{') {
          if (!parse_braces(min, max))
            fail(at, "'{' that does not start a repetition {m}, {m,} or {m,n} (escape it: '\\{')");
        } else {
          break;
        }
        if (quantified) fail(at, "quantifier '" + std::string(1, q) + "' with nothing to repeat");
        if (atom_kind == kind::begin || atom_kind == kind::end || atom_kind == kind::wordb ||
            atom_kind == kind::not_wordb)
          fail(at, "quantifier after an assertion");
        quantified = true;
        node r;
        r.k = kind::repeat;
        r.min = min;
        r.max = max;
        if (!at_end() && peek() == '?') {
          r.greedy = false;
          ++pos;
        }
        r.children.push_back(atom);
        atom = add(std::move(r));
      }
      seq.children.push_back(atom);
    }
    return add(std::move(seq));
  }

  std::uint32_t parse_alternation(std::size_t depth) {
    node alt;
    alt.k = kind::alternation;
    alt.children.push_back(parse_sequence(depth));
    while (!at_end() && peek() == '|') {
      ++pos;
      alt.children.push_back(parse_sequence(depth));
    }
    if (alt.children.size() == 1) return alt.children[0];
    return add(std::move(alt));
  }

  std::uint32_t emit(pattern_op op, std::uint32_t x = 0, std::uint32_t y = 0,
                     std::uint8_t value = 0) {
    if (program.size() >= pattern_max_program)
      fail(0, "pattern larger than " + std::to_string(pattern_max_program) +
                  " instructions once repetitions are expanded");
    program.push_back(pattern_instruction{op, value, x, y});
    return static_cast<std::uint32_t>(program.size() - 1);
  }
  [[nodiscard]] std::uint32_t here() const noexcept {
    return static_cast<std::uint32_t>(program.size());
  }

  // Recursion here follows the syntax tree, whose depth the parser bounds.
  void generate(std::uint32_t id) {
    const node& n = nodes[id];
    switch (n.k) {
      case kind::empty: return;
      case kind::byte: emit(pattern_op::byte, 0, 0, n.value); return;
      case kind::any: emit(pattern_op::any); return;
      case kind::set: emit(pattern_op::set, n.set); return;
      case kind::begin: emit(pattern_op::begin); return;
      case kind::end: emit(pattern_op::end); return;
      case kind::wordb: emit(pattern_op::word_boundary); return;
      case kind::not_wordb: emit(pattern_op::not_word_boundary); return;
      case kind::concat:
        for (const std::uint32_t c : std::vector<std::uint32_t>(n.children)) generate(c);
        return;
      case kind::alternation: {
        const std::vector<std::uint32_t> children = n.children;
        std::vector<std::uint32_t> jumps;
        for (std::size_t i = 0; i < children.size(); ++i) {
          if (i + 1 < children.size()) {
            const std::uint32_t split = emit(pattern_op::split);
            program[split].x = here();
            generate(children[i]);
            jumps.push_back(emit(pattern_op::jump));
            program[split].y = here();
          } else {
            generate(children[i]);
          }
        }
        for (const std::uint32_t j : jumps) program[j].x = here();
        return;
      }
      case kind::repeat: {
        const std::uint32_t child = n.children[0];
        const std::uint32_t min = n.min;
        const std::uint32_t max = n.max;
        const bool greedy = n.greedy;
        for (std::uint32_t i = 0; i < min; ++i) generate(child);
        auto prefer = [&](std::uint32_t split, std::uint32_t body, std::uint32_t out) {
          program[split].x = greedy ? body : out;
          program[split].y = greedy ? out : body;
        };
        if (max == pattern_unbounded) {
          const std::uint32_t split = emit(pattern_op::split);
          const std::uint32_t body = here();
          generate(child);
          emit(pattern_op::jump, split);
          prefer(split, body, here());
        } else {
          std::vector<std::uint32_t> splits;
          std::vector<std::uint32_t> bodies;
          for (std::uint32_t i = min; i < max; ++i) {
            splits.push_back(emit(pattern_op::split));
            bodies.push_back(here());
            generate(child);
          }
          for (std::size_t i = 0; i < splits.size(); ++i) prefer(splits[i], bodies[i], here());
        }
        return;
      }
    }
  }

  void compile() {
    const std::uint32_t root = parse_alternation(0);
    if (!at_end()) fail(pos, "')' without an opening '('");
    generate(root);
    emit(pattern_op::match);
  }
};

}  // namespace detail

DDO_INLINE pattern::pattern(std::string text) : text_(std::move(text)) {
  detail::pattern_compiler compiler{text_, 0, {}, classes_, program_};
  compiler.compile();
}

DDO_INLINE std::optional<pattern_match> pattern::find(std::string_view subject) const {
  using detail::pattern_op;
  const std::size_t size = program_.size();
  // A thread: the instruction it waits at and where its match started; lists are in priority
  // order (the order a backtracking matcher would try them).
  struct thread {
    std::uint32_t pc;
    std::size_t start;
  };
  std::vector<thread> current;
  std::vector<thread> next;
  current.reserve(size);
  next.reserve(size);
  std::vector<std::size_t> visited(size, static_cast<std::size_t>(-1));  // position last added
  std::vector<std::uint32_t> stack;
  stack.reserve(size);

  // Adds the thread at pc and everything it reaches without consuming a byte, in priority order,
  // with an explicit stack. Each instruction is added at most once per position.
  auto add = [&](std::vector<thread>& list, std::uint32_t pc0, std::size_t start, std::size_t at) {
    stack.push_back(pc0);
    while (!stack.empty()) {
      const std::uint32_t pc = stack.back();
      stack.pop_back();
      if (visited[pc] == at) continue;
      visited[pc] = at;
      const auto& in = program_[pc];
      switch (in.op) {
        case pattern_op::jump: stack.push_back(in.x); break;
        case pattern_op::split:
          stack.push_back(in.y);
          stack.push_back(in.x);
          break;
        case pattern_op::begin:
          if (at == 0) stack.push_back(pc + 1);
          break;
        case pattern_op::end:
          if (at == subject.size()) stack.push_back(pc + 1);
          break;
        case pattern_op::word_boundary:
        case pattern_op::not_word_boundary: {
          const bool before = at > 0 && detail::is_word_byte(static_cast<unsigned char>(subject[at - 1]));
          const bool after =
              at < subject.size() && detail::is_word_byte(static_cast<unsigned char>(subject[at]));
          if ((before != after) == (in.op == pattern_op::word_boundary)) stack.push_back(pc + 1);
          break;
        }
        default: list.push_back(thread{pc, start}); break;
      }
    }
  };

  std::optional<pattern_match> found;
  for (std::size_t at = 0;; ++at) {
    if (!found) add(current, 0, at, at);  // a match starting here ranks below earlier starts
    if (current.empty()) {
      if (found || at >= subject.size()) break;
      continue;
    }
    next.clear();
    const bool more = at < subject.size();
    const auto byte = more ? static_cast<unsigned char>(subject[at]) : 0;
    for (const thread& t : current) {
      const auto& in = program_[t.pc];
      bool step = false;
      switch (in.op) {
        case pattern_op::match: found = pattern_match{t.start, at - t.start}; break;
        case pattern_op::byte: step = more && byte == in.value; break;
        case pattern_op::any: step = more && byte != '\n' && byte != '\r'; break;
        case pattern_op::set: step = more && classes_[in.x].has(byte); break;
        default: break;
      }
      if (in.op == pattern_op::match) break;  // lower-priority threads cannot win any more
      if (step) add(next, t.pc + 1, t.start, at + 1);
    }
    current.swap(next);
    if (!more) break;
  }
  return found;
}

}  // namespace v0
}  // namespace ddo
