// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The clocks and durations ddo uses (std::chrono::steady_clock, duration, duration_cast),
/// without the rest of <chrono>.
///
/// Since C++20, libstdc++'s <chrono> adds the calendar, time zones and their stream output
/// (<sstream>, <istream>): about 20k tokens that no ddo header uses, and 8 MB of GCC's memory in
/// every TU including the umbrella (docs/development.md, "What including ddo costs"). The clocks
/// and durations live in <bits/chrono.h>, which <thread>, <mutex> and <condition_variable>
/// include anyway; other standard libraries get <chrono>. Include this header, not <chrono>,
/// in ddo's headers (tests/build_checks/check_layers.py keeps it so).

#include <version>  // defines __GLIBCXX__ under libstdc++

#if defined(__GLIBCXX__) && __has_include(<bits/chrono.h>)
#include <bits/chrono.h>
#else
#include <chrono>
#endif
