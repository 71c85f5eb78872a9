// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How ddo-run and ddo-flux end: one mapping from what went wrong to an exit status and
/// one place that prints the reason, so the two programs cannot drift apart (an escaped message,
/// stdout flushed before stderr, success only once stdout reached its file).

#include <cstdio>
#include <exception>
#include <string>

#include "ddo/core/error.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/core/text.hpp"

namespace ddo::runner {

inline constexpr int exit_failure = 1;
/// A mistake in the command line, a setting or a file format: fixable by the caller.
inline constexpr int exit_usage = 2;

/// Prints "PROGRAM: MESSAGE" on stderr (the message escaped, whatever it echoes) after what the
/// program already printed on stdout, and returns @p status.
inline int report_failure(const char* program, const std::string& message, int status) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n", program, ddo::sanitize_utf8(message).c_str());
  return status;
}

/// Runs @p run(argc, argv) and turns its result or exception into the exit status: settings,
/// usage and format errors exit 2, every other failure 1; a 0 stands only once everything the
/// program printed reached standard output (a full disk is a failure, not success).
template <class Run>
int run_program(const char* program, Run&& run, int argc, char** argv) {
  try {
    const int status = run(argc, argv);
    if (status == 0) ddo::flush_standard_output();
    return status;
  } catch (const ddo::config_error& error) {
    return report_failure(program, error.what(), exit_usage);
  } catch (const ddo::usage_error& error) {
    return report_failure(program, error.what(), exit_usage);
  } catch (const ddo::format_error& error) {
    return report_failure(program, error.what(), exit_usage);
  } catch (const std::exception& error) {
    return report_failure(program, error.what(), exit_failure);
  }
}

}  // namespace ddo::runner
