// SPDX-License-Identifier: Apache-2.0
#include "ddo/core/pattern.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <regex>  // the test compares against std::regex; ddo itself never includes it
#include <string>
#include <vector>

namespace {

std::optional<ddo::pattern_match> std_find(const std::regex& re, const std::string& s) {
  std::smatch m;
  if (!std::regex_search(s, m, re)) return std::nullopt;
  return ddo::pattern_match{static_cast<std::size_t>(m.position(0)),
                            static_cast<std::size_t>(m.length(0))};
}

std::optional<ddo::pattern_match> std_find(const std::string& p, const std::string& s) {
  return std_find(std::regex(p, std::regex::ECMAScript), s);
}

std::string error_of(const std::string& p) {
  try {
    ddo::pattern compiled(p);
  } catch (const ddo::pattern_error& e) {
    CHECK(e.pattern() == p);
    return e.what();
  }
  return "";
}

// Random patterns of the dialect over a small alphabet, so that matches are frequent. A
// repeated part never matches the empty string: there std::regex implementations disagree with
// each other (libstdc++ stops repeating after an empty iteration; ddo, like RE2, does not).
struct pattern_generator {
  std::mt19937_64& rng;
  int pick(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }
  struct piece {
    std::string text;
    bool nullable = false;  // may match the empty string
  };

  piece atom(int depth) {
    static const char* const atoms[] = {"a", "b", "c", ".", "_", "0", "1", "\\.", "\\d", "\\w",
                                        "\\s", "\\D", "[ab]", "[^a]", "[a-c0-9]", "[\\d_]",
                                        "[^.b]", "\\W", "\\x61", "\\b", "\\B"};
    const int choice = pick(depth < 3 ? 14 : 10);
    if (choice < 10) {
      const std::string a = atoms[pick(static_cast<int>(std::size(atoms)))];
      return {a, a == "\\b" || a == "\\B"};
    }
    const piece inner = alternation(depth + 1);
    return {(choice < 12 ? "(" : "(?:") + inner.text + ")", inner.nullable};
  }
  piece quantified(int depth) {
    piece a = atom(depth);
    static const char* const quantifiers[] = {"*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}",
                                              "*?", "+?", "??", "{1,2}?"};
    if (!a.nullable && pick(3) == 0) {
      const std::string q = quantifiers[pick(static_cast<int>(std::size(quantifiers)))];
      a.text += q;
      a.nullable = q[0] == '*' || q[0] == '?' || q.starts_with("{0");
    }
    return a;
  }
  piece sequence(int depth) {
    piece s{"", true};
    if (pick(6) == 0) s.text += "^";
    const int n = 1 + pick(4);
    for (int i = 0; i < n; ++i) {
      const piece q = quantified(depth);
      s.text += q.text;
      s.nullable = s.nullable && q.nullable;
    }
    if (pick(6) == 0) s.text += "$";
    return s;
  }
  piece alternation(int depth) {
    piece s = sequence(depth);
    while (pick(4) == 0) {
      const piece t = sequence(depth);
      s.text += "|" + t.text;
      s.nullable = s.nullable || t.nullable;
    }
    return s;
  }
};

std::string random_subject(std::mt19937_64& rng) {
  static const char alphabet[] = "abc._01 Z";
  std::string s(rng() % 14, ' ');
  for (char& c : s) c = alphabet[rng() % (sizeof alphabet - 1)];
  return s;
}

}  // namespace

TEST_SUITE("core") {
  TEST_CASE("pattern finds what std::regex_search finds on the shipped patterns") {
    const std::vector<std::string> patterns = {
        R"((^|\.)(proj_in|proj_out|conv_in|conv_out|lm_head)$)",
        R"((^|\.)[A-Za-z0-9_]*(embed|embedder|embedding|embeddings)[A-Za-z0-9_]*$)",
        R"((^|\.)[A-Za-z0-9_]*(norm|ln)[A-Za-z0-9_]*$)",
        R"(down\.\d+)", R"(up\.\d+\.)", "^proj_out$", ".*", "embed", "norm_out",
        R"(transformer_blocks\.\d+)", R"(model\.layers\.[0-9]{1,3}\.)", "blocks?\\.(\\d+)"};
    const std::vector<std::string> names = {
        "transformer_blocks.12.attn.to_q", "proj_out", "x.proj_out", "x_proj_out",
        "model.embed_tokens", "time_text_embed.timestep_embedder.linear_1", "norm_out.linear",
        "single_transformer_blocks.3.norm.linear", "model.layers.7.input_layernorm",
        "down.3.conv", "decoder.up.12.block.0", "lm_head", "", "block.5", "blocks.17.ff"};
    for (const auto& p : patterns) {
      const ddo::pattern compiled(p);
      CHECK(compiled.text() == p);
      for (const auto& n : names) {
        INFO("pattern ", p, " name ", n);
        const auto ours = compiled.find(n);
        const auto theirs = std_find(p, n);
        REQUIRE(ours.has_value() == theirs.has_value());
        CHECK(compiled.search(n) == theirs.has_value());
        if (ours) {
          CHECK(ours->position == theirs->position);
          CHECK(ours->length == theirs->length);
        }
      }
    }
  }

  TEST_CASE("pattern agrees with std::regex on random patterns and names") {
    std::random_device seed_source;
    const auto seed = (static_cast<std::uint64_t>(seed_source()) << 32) | seed_source();
    INFO("seed ", seed);
    std::mt19937_64 rng(seed);
    pattern_generator gen{rng};
    int compared = 0;
    int matched = 0;
    for (int i = 0; i < 600; ++i) {
      const std::string p = gen.alternation(0).text;
      const ddo::pattern compiled(p);
      // std::regex compiles each pattern once too: its construction, not the search, is what
      // costs under the sanitizers (7,200 constructions took 26 s under ASan).
      const std::regex theirs_compiled(p, std::regex::ECMAScript);
      for (int j = 0; j < 12; ++j) {
        const std::string s = random_subject(rng);
        INFO("pattern '", p, "' subject '", s, "'");
        const auto ours = compiled.find(s);
        const auto theirs = std_find(theirs_compiled, s);
        REQUIRE(ours.has_value() == theirs.has_value());
        if (ours) {
          ++matched;
          CHECK(ours->position == theirs->position);
          CHECK(ours->length == theirs->length);
        }
        ++compared;
      }
    }
    CHECK(compared == 600 * 12);
    CHECK(matched > compared / 10);  // the generator exercises matches, not only misses
  }

  TEST_CASE("pattern leftmost-first: alternation order and laziness decide the match") {
    CHECK(ddo::pattern("a|ab").find("xab")->length == 1);
    CHECK(ddo::pattern("ab|a").find("xab")->length == 2);
    CHECK(ddo::pattern("a+?").find("aaa")->length == 1);
    CHECK(ddo::pattern("a{2,3}").find("aaaa")->length == 3);
    CHECK(ddo::pattern("a{2,3}?").find("aaaa")->length == 2);
    CHECK(ddo::pattern("b*").find("abb")->position == 0);  // empty match at 0, as regex_search
    CHECK(ddo::pattern("b*").find("abb")->length == 0);
    CHECK_FALSE(ddo::pattern("^b").search("ab"));
    CHECK(ddo::pattern("b$").search("ab"));
    CHECK_FALSE(ddo::pattern("a.c").search("a\nc"));
    CHECK(ddo::pattern("\\bfoo\\b").search("x.foo.y"));
    CHECK_FALSE(ddo::pattern("\\bfoo\\b").search("xfoo"));
  }

  TEST_CASE("pattern rejects constructs outside the dialect, naming the pattern and the construct") {
    CHECK(error_of("(a)\\1").find("backreference '\\1'") != std::string::npos);
    CHECK(error_of("(a)\\1").find("pattern '(a)\\1'") != std::string::npos);
    CHECK(error_of("(?<n>a)\\k<n>").find("named group") != std::string::npos);
    CHECK(error_of("a\\k<n>").find("named backreference") != std::string::npos);
    CHECK(error_of("foo(?=bar)").find("lookahead '(?='") != std::string::npos);
    CHECK(error_of("foo(?!bar)").find("lookahead '(?!'") != std::string::npos);
    CHECK(error_of("(?<=x)y").find("lookbehind '(?<='") != std::string::npos);
    CHECK(error_of("(?<!x)y").find("lookbehind '(?<!'") != std::string::npos);
    CHECK(error_of("(?i)abc").find("inline flags") != std::string::npos);
    CHECK(error_of("\\p{L}").find("Unicode property") != std::string::npos);
    CHECK(error_of("(unclosed").find("'(' without a closing ')'") != std::string::npos);
    CHECK(error_of("a)").find("')' without an opening '('") != std::string::npos);
    CHECK(error_of("[ab").find("'[' without a closing ']'") != std::string::npos);
    CHECK(error_of("*a").find("nothing to repeat") != std::string::npos);
    CHECK(error_of("a**").find("nothing to repeat") != std::string::npos);
    CHECK(error_of("a{x}").find("'{'") != std::string::npos);
    CHECK(error_of("a{3,1}").find("n < m") != std::string::npos);
    CHECK(error_of("a{5000}").find("above 1000") != std::string::npos);
    CHECK(error_of("[z-a]").find("out of order") != std::string::npos);
    CHECK(error_of("\\q").find("unknown escape '\\q'") != std::string::npos);
    CHECK(error_of("[]a]").find("']' first in a character class") != std::string::npos);
    CHECK(error_of("[^]]").find("']' first in a character class") != std::string::npos);
    CHECK(ddo::pattern("[\\]a]").search("]"));
    CHECK(error_of("a\\").find("end of the pattern") != std::string::npos);
    CHECK(error_of("^*").find("quantifier after an assertion") != std::string::npos);
    CHECK(error_of("(((((a){1000}){1000}){1000}))").find("instructions") != std::string::npos);
    std::string deep(300, '(');
    deep += std::string(300, ')');
    CHECK(error_of(deep).find("nested deeper") != std::string::npos);
    const auto offset = [](const std::string& p) {
      try {
        ddo::pattern compiled(p);
      } catch (const ddo::pattern_error& e) {
        return e.offset();
      }
      return std::size_t{999};
    };
    CHECK(offset("abc(?=x)") == 3);
    CHECK(offset("ab\\2") == 2);
  }

  TEST_CASE("pattern matches a 60,000-character name in bounded time and stack") {
    std::mt19937_64 rng(std::random_device{}());
    std::string name;
    while (name.size() < 60000) name += "layer_" + std::to_string(rng() % 1000) + ".";
    name += "proj_out";
    const auto start = std::chrono::steady_clock::now();
    const ddo::pattern builtin(R"((^|\.)[A-Za-z0-9_]*(norm|ln)[A-Za-z0-9_]*$)");
    CHECK_FALSE(builtin.search(name));
    const ddo::pattern out(R"((^|\.)(proj_in|proj_out|conv_in|conv_out|lm_head)$)");
    const auto m = out.find(name);
    REQUIRE(m.has_value());
    CHECK(m->position == name.size() - 9);
    CHECK(m->length == 9);
    CHECK(ddo::pattern("(?:a|b)*c").find(std::string(100000, 'a') + "c")->length == 100001);
    CHECK(ddo::pattern(".*").find(name)->length == name.size());
    const auto seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < 10.0);  // linear time: a few milliseconds in a release build
  }

  TEST_CASE("compile_patterns and first_match keep order") {
    const auto ps = ddo::compile_patterns({"zzz", "b+", "a"});
    REQUIRE(ps.size() == 3);
    CHECK(ddo::first_match(ps, "cab")->text() == "b+");
    CHECK(ddo::first_match(ps, "ca")->text() == "a");
    CHECK(ddo::first_match(ps, "xyz") == nullptr);
    CHECK_THROWS_AS((void)ddo::compile_patterns({"ok", "(?=no)"}), ddo::pattern_error);
  }
}
