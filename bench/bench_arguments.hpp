// SPDX-License-Identifier: Apache-2.0
#pragma once
// Argument parsing shared by the benchmarks: Boost.Program_options like the examples, with
// whole numbers checked against their range (so "-1" is an error, never a huge unsigned value)
// and every parse error reported as a usage error (exit status 2), never an uncaught exception.
// (Another change adds a checked non-negative number parser to ddo/cli/; until it lands the
// benchmarks check ranges here.)

#include <boost/program_options.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace ddo_bench {

namespace po = boost::program_options;

/// Prints "PROGRAM: MESSAGE" and exits with status 2 (invalid input).
[[noreturn]] inline void usage_exit(const char* program, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s (see --help)\n", program, message.c_str());
  std::exit(2);
}

/// A whole number from @p text in [@p lo, @p hi]; anything else exits with a usage error naming
/// @p option, the text seen and the range.
[[nodiscard]] inline std::int64_t whole_number(const char* program, const std::string& option,
                                               const std::string& text, std::int64_t lo,
                                               std::int64_t hi) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < lo || value > hi)
    usage_exit(program, "--" + option + " = '" + text + "': expected a whole number from " +
                            std::to_string(lo) + " to " + std::to_string(hi));
  return value;
}

/// A comma-separated list of whole numbers, each in [@p lo, @p hi], at least one.
[[nodiscard]] inline std::vector<std::int64_t> whole_numbers(const char* program,
                                                             const std::string& option,
                                                             const std::string& text,
                                                             std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(whole_number(program, option, item, lo, hi));
  if (values.empty()) usage_exit(program, "--" + option + " needs at least one number");
  return values;
}

/// Parses @p argv against @p options: --help prints @p usage and the options and exits 0; an
/// unknown option, a missing value or text where a value was expected exits 2 with the message.
[[nodiscard]] inline po::variables_map parse_or_exit(const char* program, int argc, char** argv,
                                                     po::options_description& options,
                                                     const char* usage) {
  options.add_options()("help,h", "print this help and exit");
  po::variables_map vm;
  try {
    const po::positional_options_description none;
    po::store(po::command_line_parser(argc, argv).options(options).positional(none).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    usage_exit(program, e.what());
  }
  if (vm.count("help") != 0) {
    std::cout << "usage: " << program << " " << usage << "\n\n" << options << "\n";
    std::exit(0);
  }
  return vm;
}

/// The option @p name (declared as a string value) as a whole number in [lo, hi], or @p fallback
/// when it was not given.
[[nodiscard]] inline std::int64_t number_or(const char* program, const po::variables_map& vm,
                                            const char* name, std::int64_t fallback,
                                            std::int64_t lo, std::int64_t hi) {
  if (vm.count(name) == 0) return fallback;
  return whole_number(program, name, vm[name].as<std::string>(), lo, hi);
}

/// A number from @p text in [@p lo, @p hi] (fractions allowed: sizes in GiB); anything else
/// exits with a usage error naming @p option, the text seen and the range.
[[nodiscard]] inline double real_number(const char* program, const std::string& option,
                                        const std::string& text, double lo, double hi) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !(value >= lo && value <= hi)) {
    std::ostringstream range;
    range << lo << " to " << hi;
    usage_exit(program, "--" + option + " = '" + text + "': expected a number from " + range.str());
  }
  return value;
}

/// The option @p name (declared as a string value) as a number in [lo, hi], or @p fallback when
/// it was not given.
[[nodiscard]] inline double real_or(const char* program, const po::variables_map& vm,
                                    const char* name, double fallback, double lo, double hi) {
  if (vm.count(name) == 0) return fallback;
  return real_number(program, name, vm[name].as<std::string>(), lo, hi);
}

/// The command line as one string, for the report.
[[nodiscard]] inline std::string command_line(int argc, char** argv) {
  std::string command;
  // Appended piecewise: g++ 12 at -O3 warns (-Wrestrict, a false positive) on
  // `const char* + std::string&&`, which would stop a release build with --werror.
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += ' ';
    command += argv[i];
  }
  return command;
}

}  // namespace ddo_bench
