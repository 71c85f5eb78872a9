// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The cache of synthetic models ddo-run generates on first use: one directory per set of
/// parameters (blocks, hidden, MLP ratio, dtype, shards, seed), written with ddo's own
/// synthetic-model writer (ddo/model/synthetic_model.hpp, what ddo-make-model uses) — no
/// external process. Example code (examples/runner/).

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/synthetic_model.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief A file-name-safe key naming every parameter of @p o (not its output path), e.g.
/// "dit-b8-h256-r4-BF16-k1-s1", "flux-b19-d38-h3072-r4-BF16-k1-s0" (d: single-stream blocks).
[[nodiscard]] inline std::string synthetic_model_key(const synthetic_model_options& o) {
  return std::string(to_string(o.shape)) + "-b" + std::to_string(o.blocks) +
         (o.shape == synthetic_shape::flux ? "-d" + std::to_string(o.single_blocks) : std::string()) +
         "-h" + std::to_string(o.hidden) + "-r" +
         std::to_string(o.mlp_ratio) + "-" + std::string(to_string(o.type)) + "-k" +
         std::to_string(o.shards) + "-s" + std::to_string(o.seed);
}

/// @brief The largest Flux-shaped model no larger than @p o whose bytes fit @p disk_free_bytes
/// (with 10% to spare; 0: already on disk, not checked) and half of @p ram_bytes (the rest is
/// for the pinned copy and the page cache; 0: unknown, not checked): fewer double-stream blocks,
/// twice as many single-stream ones, at least one of each. Returns @p o when it fits; @p why
/// says what was too small when it did not.
[[nodiscard]] inline synthetic_model_options fit_flux_model(synthetic_model_options o,
                                                            std::uint64_t disk_free_bytes,
                                                            std::uint64_t ram_bytes,
                                                            std::string* why) {
  auto bytes_of = [](const synthetic_model_options& m) {
    std::uint64_t b = 0;
    for (const auto& spec : synthetic_model_specs(m)) b += spec.bytes();
    return b;
  };
  auto fits = [&](std::uint64_t b) {
    return (disk_free_bytes == 0 || b + b / 10 <= disk_free_bytes) &&
           (ram_bytes == 0 || 2 * b <= ram_bytes);
  };
  const std::uint64_t full = bytes_of(o);
  if (fits(full)) return o;
  auto smaller = o;
  while (smaller.blocks > 1) {
    --smaller.blocks;
    smaller.single_blocks = std::max<std::uint32_t>(1, 2 * smaller.blocks);
    if (fits(bytes_of(smaller))) break;
  }
  if (why != nullptr) {
    auto gbs = [](std::uint64_t b) { return format_size(b, size_unit::gb, 1); };
    *why = "the Flux-sized model (" + gbs(full) + ") needs " +
           (disk_free_bytes != 0 && full + full / 10 > disk_free_bytes
                ? gbs(full + full / 10) + " of disk, " + gbs(disk_free_bytes) + " free"
                : gbs(2 * full) + " of RAM (the pinned copy and the page cache), " +
                      gbs(ram_bytes) + " available") +
           "; using " + std::to_string(smaller.blocks) + " double- and " +
           std::to_string(smaller.single_blocks) + " single-stream blocks (" +
           gbs(bytes_of(smaller)) + ") instead";
  }
  return smaller;
}

/// @brief Where cached models live when no directory is given: "synthetic-models" beside the
/// running executable (the build dir) when writable, else $TMPDIR (or /tmp)/ddo-synthetic-models.
/// (No DDO_* variable: ddo's settings resolution reserves that prefix and warns about names it
/// does not know.)
[[nodiscard]] inline std::filesystem::path default_model_cache_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto dir = exe.parent_path();
    if (::access(dir.c_str(), W_OK) == 0) return dir / "synthetic-models";
  }
  const char* tmp = std::getenv("TMPDIR");
  return std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
         "ddo-synthetic-models";
}

/// @brief The file a cached model is loaded from: model.safetensors, or the index when sharded.
[[nodiscard]] inline std::filesystem::path cached_model_entry(const synthetic_model_options& o,
                                                              const std::filesystem::path& cache_dir) {
  return cache_dir / synthetic_model_key(o) /
         (o.shards > 1 ? "model.safetensors.index.json" : "model.safetensors");
}

/// @brief The cached model for @p o (its output path is ignored) under @p cache_dir, written
/// first when missing. The model is written into a temporary directory and renamed into place,
/// so an interrupted run never leaves a half-written model that a later run would trust; the
/// temporaries of runs that were killed are removed first, and a model larger than the free
/// disk space is refused with both numbers before anything is written.
/// @param generated set to whether this call wrote the model.
/// @throws usage_error for invalid parameters, io_error when the cache cannot be written.
inline std::string ensure_synthetic_model(synthetic_model_options o,
                                          const std::filesystem::path& cache_dir,
                                          bool* generated = nullptr) {
  const auto entry = cached_model_entry(o, cache_dir);
  if (generated != nullptr) *generated = false;
  if (std::filesystem::exists(entry)) return entry.string();
  const auto key = synthetic_model_key(o);
  // `<key>.tmp-<pid>`: a ddo temporary name (ddo/core/atomic_file.hpp), so the debris of a killed
  // run is found and removed here, and the program's SIGINT/SIGTERM handler finds this run's.
  const auto tmp = cache_dir / (key + std::string(temporary_marker) + std::to_string(::getpid()));
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  (void)remove_stale_temporaries(cache_dir);
  std::filesystem::remove_all(tmp, ec);
  std::filesystem::create_directories(tmp, ec);
  if (ec)
    throw io_error(tmp.string(), ec.value(),
                   "cannot create the model cache directory " + tmp.string() + ": " + ec.message() +
                       " (give a writable directory with --cache-dir)");
  try {
    std::uint64_t bytes = 0;
    for (const auto& spec : synthetic_model_specs(o)) bytes += spec.bytes();
    require_free_space(cache_dir, bytes + bytes / 100 + (1u << 20),
                       "synthetic model " + key + " into the cache");
  } catch (...) {
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  o.output = (tmp / entry.filename()).string();
  try {
    (void)write_synthetic_model(o);
  } catch (...) {
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, cache_dir / key, ec);
  if (ec) {
    std::filesystem::remove_all(tmp, ec);
    // Another process may have finished the same model first; that copy is as good.
    if (!std::filesystem::exists(entry))
      throw io_error((cache_dir / key).string(), ec.value(),
                     "cannot move the generated model into " + (cache_dir / key).string());
    return entry.string();
  }
  if (generated != nullptr) *generated = true;
  return entry.string();
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
