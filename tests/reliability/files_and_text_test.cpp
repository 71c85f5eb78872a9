// SPDX-License-Identifier: Apache-2.0
// Classes 4 and 6 of the reliability issue: files written aside then renamed (and the debris of
// killed processes removed), and bytes that are not text kept out of messages and JSON.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/env_source.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/detail/json.hpp"
#include "ddo/core/text.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/profile/profile_store.hpp"
#include "model/model_test_support.hpp"

namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The pid of a process that has exited (and been reaped): surely not alive.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

std::size_t entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

namespace files_and_text_test {

/// A complete profile file of @p name whose device_name is @p raw, written into the JSON text
/// as it is (bytes the writer would have escaped).
inline std::string profile_with_device_name(const std::string& name, const std::string& raw) {
  ddo::capacity_profile p;
  p.name = name;
  p.device_name = "DEVICE";
  std::string text = ddo::profile_store::format(p);
  text.replace(text.find("DEVICE"), 6, raw);
  return text;
}

}  // namespace files_and_text_test
using files_and_text_test::profile_with_device_name;

TEST_SUITE("reliability") {
  TEST_CASE("an atomic write replaces the file whole or not at all") {
    ddo_test::temp_dir dir;
    const fs::path target = dir.file("out.json");
    const std::string first = ddo_test::random_data(100000, 21);
    ddo::write_file_atomically(target, first);
    CHECK(slurp(target) == first);
    // A writer that fails half-way leaves the previous file and no temporary.
    CHECK_THROWS_AS(ddo::write_atomically(target,
                                          [&](const fs::path& tmp) {
                                            std::ofstream(tmp) << "partial";
                                            throw ddo::io_error(tmp.string(), 28, "disk full");
                                          }),
                    ddo::io_error);
    CHECK(slurp(target) == first);
    CHECK(entries(dir.file(".")) == 1);
    const std::string second = ddo_test::random_data(5000, 22);
    ddo::write_file_atomically(target, second);
    CHECK(slurp(target) == second);
    CHECK(entries(dir.file(".")) == 1);
    // A target that is a directory, or in a missing directory, is refused before writing.
    CHECK_THROWS_WITH_AS(ddo::check_output_path(dir.file("."), "trace file"),
                         doctest::Contains("is a directory"), ddo::io_error);
    CHECK_THROWS_WITH_AS(ddo::check_output_path(dir.file("no/such/x.json"), "trace file"),
                         doctest::Contains("does not exist"), ddo::io_error);
    CHECK_NOTHROW(ddo::check_output_path(target, "trace file"));
    if (::geteuid() != 0) {  // root writes anywhere
      const auto ro = dir.file("ro");
      fs::create_directory(ro);
      fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
      CHECK_THROWS_WITH_AS(ddo::check_output_path(fs::path(ro) / "t.json", "trace file"),
                           doctest::Contains("not writable"), ddo::io_error);
      fs::permissions(ro, fs::perms::owner_all);
    }
  }

  TEST_CASE("temporaries of dead processes are removed at the next start, live ones kept") {
    ddo_test::temp_dir dir;
    const pid_t dead = dead_pid();
    const auto stale_dir = fs::path(dir.file("dit-b2.tmp-" + std::to_string(dead)));
    fs::create_directories(stale_dir / "inner");
    std::ofstream(stale_dir / "inner" / "model.safetensors") << "half";
    const auto stale_file = fs::path(dir.file(".t.json.tmp-" + std::to_string(dead) + "-123"));
    std::ofstream(stale_file) << "half";
    const auto mine = fs::path(dir.file(".x.tmp-" + std::to_string(::getpid()) + "-1"));
    std::ofstream(mine) << "in progress";
    const auto init = fs::path(dir.file(".y.tmp-1-5"));  // pid 1 is alive
    std::ofstream(init) << "someone else's";
    const auto unrelated = fs::path(dir.file("notes.tmp-abc"));
    std::ofstream(unrelated) << "not ours";
    CHECK(ddo::remove_stale_temporaries(dir.file(".")) == 2);
    CHECK_FALSE(fs::exists(stale_dir));
    CHECK_FALSE(fs::exists(stale_file));
    CHECK(fs::exists(mine));
    CHECK(fs::exists(init));
    CHECK(fs::exists(unrelated));
    CHECK(ddo::temporary_owner(".a.tmp-42-7") == 42);
    CHECK(ddo::temporary_owner("k.tmp-42") == 42);
    CHECK(ddo::temporary_owner("k.tmp-") == 0);
    CHECK(ddo::temporary_owner("k.tmp-4x") == 0);
    CHECK(ddo::temporary_owner("plain") == 0);
  }

  TEST_CASE("an output larger than the free space is refused with both numbers") {
    ddo_test::temp_dir dir;
    CHECK_THROWS_WITH_AS(ddo::require_free_space(dir.file("."), UINT64_MAX / 2, "model"),
                         doctest::Contains("9223372036854775807 bytes"), ddo::io_error);
    CHECK_NOTHROW(ddo::require_free_space(dir.file("."), 1, "model"));
  }

  TEST_CASE("a special file as an output is refused and left as it is") {
    // Renaming a temporary over a device replaced the node: as root, `ddo-run --trace /dev/full`
    // turned /dev/full into a regular file (issue 30, found while testing failed writes).
    ddo_test::temp_dir dir;
    const std::string fifo = dir.file("out.fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(ddo::special_file_kind(fifo) == "a FIFO");
    CHECK(ddo::special_file_kind("/dev/null") == "a character device");
    CHECK(ddo::special_file_kind(dir.file("none")).empty());
    CHECK_THROWS_WITH_AS(ddo::check_output_path(fifo, "trace file"),
                         doctest::Contains("it is a FIFO, not a regular file"), ddo::io_error);
    CHECK_THROWS_WITH_AS(ddo::write_file_atomically(fifo, "{}"),
                         doctest::Contains("it is a FIFO, not a regular file"), ddo::io_error);
    struct stat st {};
    REQUIRE(::stat(fifo.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    for (const auto& e : fs::directory_iterator(dir.file(".")))  // no temporary left
      CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
    // A directory to be created is checked through its nearest existing ancestor.
    CHECK_NOTHROW(ddo::check_output_directory(dir.file("a/b/c"), "profile directory"));
    CHECK_THROWS_WITH_AS(ddo::check_output_directory(fifo + "/sub", "profile directory"),
                         doctest::Contains("is not a directory"), ddo::io_error);
  }

  TEST_CASE("sanitize_utf8 keeps valid UTF-8 and shows other bytes and controls as \\xHH") {
    CHECK(ddo::sanitize_utf8("plain ascii") == "plain ascii");
    CHECK(ddo::sanitize_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
          "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    CHECK(ddo::sanitize_utf8("a\xff" "b") == "a\\xffb");
    CHECK(ddo::sanitize_utf8("\xc0\xaf") == "\\xc0\\xaf");            // overlong
    CHECK(ddo::sanitize_utf8("\xed\xa0\x80") == "\\xed\\xa0\\x80");   // surrogate
    CHECK(ddo::sanitize_utf8("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
    CHECK(ddo::sanitize_utf8("\xe2\x82") == "\\xe2\\x82");            // truncated
    CHECK(ddo::sanitize_utf8("line\nbreak\x1b[2J") == "line\\x0abreak\\x1b[2J");
    CHECK(ddo::sanitize_utf8("tab\tkept") == "tab\tkept");
  }

  TEST_CASE("json_string output always parses, is UTF-8, and round-trips valid text") {
    std::mt19937_64 rng(99);
    for (int i = 0; i < 5000; ++i) {
      std::string s;
      const int n = static_cast<int>(rng() % 24);
      for (int k = 0; k < n; ++k) s += static_cast<char>(rng() & 0xff);
      if (i % 3 == 0) s = ddo::sanitize_utf8(s);  // some valid inputs
      const std::string quoted = ddo::json_string(s);
      INFO(ddo::sanitize_utf8(s));
      REQUIRE(ddo::is_valid_utf8(quoted));
      for (char c : quoted) CHECK(static_cast<unsigned char>(c) >= 0x20);
      ddo::detail::json_value v;
      REQUIRE_NOTHROW(v = ddo::detail::parse_json("[" + quoted + "]"));
      REQUIRE(v.items().size() == 1);
      if (ddo::is_valid_utf8(s)) CHECK(v.items()[0].text() == s);
    }
    CHECK(ddo::json_string("a\"b\\c\n\x01\x7f") == "\"a\\\"b\\\\c\\n\\u0001\\u007f\"");
    CHECK(ddo::json_string("x\xfey") == "\"x\\\\xfey\"");
  }

  TEST_CASE("profiles: special files refused, stale temporaries removed, bytes shown as \\xHH") {
    ddo_test::temp_dir dir;
    const ddo::profile_store store(dir.file("."));
    REQUIRE(::mkfifo(store.path_of("piped").c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS((void)store.find("piped"), doctest::Contains("FIFO"), ddo::io_error);
    const auto stale = fs::path(dir.file(".gone.json.tmp-" + std::to_string(dead_pid()) + "-9"));
    std::ofstream(stale) << "half a profile";
    ddo::capacity_profile p;
    p.name = "run";
    p.device_name = "GPU \x01\xff";
    p.total_vram_bytes = 1000;
    store.save(p);
    CHECK_FALSE(fs::exists(stale));
    const auto back = store.find("run");
    REQUIRE(back.has_value());
    CHECK(ddo::is_valid_utf8(back->device_name));
    CHECK(back->device_name == "GPU \\x01\\xff");
    std::ofstream(store.path_of("bad")) << profile_with_device_name("bad", "12\xff");
    try {
      (void)store.find("bad");
      FAIL("no error");
    } catch (const ddo::format_error& e) {
      const std::string what = e.what();
      CHECK(what.find("12\\xff") != std::string::npos);
      CHECK(ddo::is_valid_utf8(what));
    }
  }

  // Every message that echoes input escapes it with ddo::sanitize_utf8 (core/error.hpp): the
  // bytes \xff\xfe (invalid UTF-8) and ESC (a control byte) from each source a user reaches.
  TEST_CASE(
      "every source's bytes reach messages escaped: flag, variable, TOML, file, tensor, profile") {
    const std::string bad = "\xff\xfe\x1bz";
    const std::string shown = "\\xff\\xfe\\x1bz";
    // Valid UTF-8, no raw control byte, and the input shown as @p needle where it is echoed.
    const auto check_message = [&](const std::string& what, const std::string& needle) {
      INFO(what);
      CHECK(ddo::is_valid_utf8(what));
      CHECK(what.find('\x1b') == std::string::npos);
      CHECK(what.find(needle) != std::string::npos);
    };
    const auto check_throws = [&](const auto& call, const std::string& needle) {
      try {
        call();
        FAIL("no error");
      } catch (const std::exception& e) {
        check_message(e.what(), needle);
      }
    };
    ddo::resolve_context context;
    context.detected_ram_gb = 64.0;
    context.running_on_wsl = false;
    SUBCASE("variable") {
      check_throws(
          [&] {
            (void)ddo::resolve_from_sources(context, ddo::env_source{{{"DDO_PRESET", bad}}});
          },
          shown);
      check_throws(
          [&] {
            (void)ddo::resolve_from_sources(context,
                                            ddo::env_source{{{"DDO_EXECUTION_MODE", bad}}});
          },
          shown);
      const auto settings = ddo::resolve_from_sources(
          context, ddo::env_source{{{"DDO_VERBOSE", bad}, {"DDO_X" + bad, "1"}}});
      REQUIRE(settings.warnings.size() >= 2);
      for (const auto& w : settings.warnings) check_message(w, shown);
    }
    SUBCASE("flag") {
      namespace po = boost::program_options;
      po::options_description options;
      ddo::add_dynamic_offload_arguments(options);
      const auto parse = [&](std::vector<std::string> args) {
        std::vector<const char*> argv = {"test"};
        for (const auto& a : args) argv.push_back(a.c_str());
        po::variables_map vm;
        po::store(po::parse_command_line(static_cast<int>(argv.size()), argv.data(), options), vm);
        return vm;
      };
      check_throws(
          [&] {
            (void)ddo::resolve_from_sources(
                context, ddo::layer_source{ddo::cli_config_layer(parse({"--ddo-preset", bad}))});
          },
          shown);
      check_throws(
          [&] {
            (void)ddo::cli_config_layer(parse({"--ddo-execution-mode", bad}));
          },
          shown);
      try {
        (void)parse({"--ddo-" + bad});
        FAIL("no error");
      } catch (const po::error& e) {
        check_message(ddo::describe_cli_error(e, options), shown);
      }
    }
    SUBCASE("TOML") {
      // Raw invalid bytes are refused by the TOML parser (not echoed); escapes give the value
      // a control byte, echoed escaped.
      check_throws([&] { (void)ddo::parse_toml_config("preset = \"" + bad + "\"\n", "s.toml"); },
                   "invalid utf-8");
      check_throws(
          [&] {
            (void)ddo::resolve_from_sources(context, ddo::layer_source{ddo::parse_toml_config(
                                                         "preset = \"\\u001bz\"\n", "s.toml")});
          },
          "\\x1bz");
    }
    SUBCASE("file name") {
      ddo_test::temp_dir dir;
      check_throws([&] { (void)ddo::load_safetensors(dir.file(bad + ".safetensors")); }, shown);
      ddo_test::write_raw(dir.file(bad + ".safetensors"), "short");
      check_throws([&] { (void)ddo::load_safetensors(dir.file(bad + ".safetensors")); }, shown);
    }
    SUBCASE("tensor name") {
      // A header must be UTF-8 (refused otherwise, without echoing it); a JSON escape gives a
      // name a control byte, echoed escaped.
      check_throws(
          [&] {
            (void)ddo::parse_safetensors_header(
                "{\"w\xff\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
                "m.safetensors");
          },
          "not valid UTF-8");
      check_throws(
          [&] {
            (void)ddo::parse_safetensors_header(
                "{\"w\\u001bz\":{\"dtype\":\"XX\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
                "m.safetensors");
          },
          "w\\x1bz");
    }
    SUBCASE("profile file") {
      ddo_test::temp_dir dir;
      const ddo::profile_store store(dir.file("."));
      // The control byte as JSON writes it (a raw one is a JSON syntax error, which names its
      // offset, not the text).
      std::ofstream(store.path_of("bad"))
          << profile_with_device_name("bad", "\xff\xfe\\u001bz");
      check_throws([&] { (void)store.find("bad"); }, shown);
    }
  }
}
