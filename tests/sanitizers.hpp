// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which sanitizer this test build runs under: g++ says so with __SANITIZE_ADDRESS__ /
// __SANITIZE_THREAD__, clang with __has_feature. Tests use it to run fewer cases of pure
// single-threaded computation there (the sanitizer builds are -O0 and 10-13x slower, with
// nothing more to find after the first cases) and to skip bounds on RSS that shadow memory and
// redzones inflate.

#if defined(__SANITIZE_ADDRESS__)
#define DDO_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DDO_TEST_UNDER_ASAN 1
#endif
#endif
#ifndef DDO_TEST_UNDER_ASAN
#define DDO_TEST_UNDER_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define DDO_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DDO_TEST_UNDER_TSAN 1
#endif
#endif
#ifndef DDO_TEST_UNDER_TSAN
#define DDO_TEST_UNDER_TSAN 0
#endif

#define DDO_TEST_UNDER_SANITIZER (DDO_TEST_UNDER_ASAN || DDO_TEST_UNDER_TSAN)
