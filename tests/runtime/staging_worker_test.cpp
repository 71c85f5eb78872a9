// SPDX-License-Identifier: Apache-2.0
// The staging worker on host_sim: pageable and file pieces through the two staging buffers,
// jobs handed to its thread, failures surfacing on the engine's thread, and a transport that
// reads files into the device itself (the transport_with_file_reads capability).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "ddo/model/file_reader.hpp"
#include "ddo/runtime/detail/staging_worker.hpp"
#include "ddo/transport/host_sim.hpp"

using ddo::detail::staged_piece;

namespace {

/// host_sim plus direct file reads: the read runs on the stream like a copy would.
struct file_reading_sim : ddo::host_sim_transport {
  std::shared_ptr<std::atomic<int>> reads = std::make_shared<std::atomic<int>>(0);
  void read_file_to_device(std::byte* dst, const std::string& path, std::uint64_t offset,
                           std::size_t bytes, stream_view s) {
    ++*reads;
    enqueue(s, [dst, path, offset, bytes] {
      std::ifstream in(path, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(offset));
      in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    });
  }
};
static_assert(ddo::transport_with_file_reads<file_reading_sim>);
static_assert(!ddo::transport_with_file_reads<ddo::host_sim_transport>);

/// Random pieces, half from host memory and half from a file, at aligned offsets with gaps.
struct piece_set {
  std::vector<std::vector<std::byte>> host;
  std::vector<std::byte> file_bytes;
  std::vector<staged_piece> pieces;
  std::vector<std::byte> expected;  // the destination image (gaps unchecked)
  std::vector<bool> covered;
  std::filesystem::path path;
  std::uint64_t span = 0;

  piece_set(std::uint32_t seed, std::size_t count) {
    std::mt19937 rng(seed);
    path = std::filesystem::temp_directory_path() / ("ddo_staging_" + std::to_string(seed) + ".bin");
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < count; ++i) {
      staged_piece p;
      p.slot_offset = offset;
      p.bytes = 1 + rng() % 20000;
      std::vector<std::byte> bytes(p.bytes);
      for (auto& b : bytes) b = static_cast<std::byte>(rng());
      if (i % 2 == 0) {
        host.push_back(bytes);
        p.host = host.back().data();
      } else {
        p.file = 0;
        p.file_offset = file_bytes.size();
        file_bytes.insert(file_bytes.end(), bytes.begin(), bytes.end());
        p.source = ddo::transfer_source::file;
      }
      pieces.push_back(p);
      expected.resize(offset + p.bytes);
      covered.resize(offset + p.bytes);
      std::memcpy(expected.data() + offset, bytes.data(), p.bytes);
      for (std::uint64_t k = offset; k < offset + p.bytes; ++k) covered[k] = true;
      offset = (offset + p.bytes + 255) / 256 * 256 + (rng() % 2) * 256;
    }
    // host pointers are stable now (host is not resized further): fix them up
    std::size_t h = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i)
      if (i % 2 == 0) pieces[i].host = host[h++].data();
    span = expected.size();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file_bytes.data()), static_cast<std::streamsize>(file_bytes.size()));
  }
  ~piece_set() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  template <class T>
  std::size_t mismatches(T& t, std::byte* device, typename T::stream_view v) const {
    std::vector<std::byte> back(span);
    auto* pinned = t.allocate_pinned(span);
    t.copy_to_host(pinned, device, span, v);
    t.synchronize(v);
    std::memcpy(back.data(), pinned, span);
    t.free_pinned(pinned, span);
    std::size_t bad = 0;
    for (std::uint64_t k = 0; k < span; ++k) bad += covered[k] && back[k] != expected[k];
    return bad;
  }
};

}  // namespace

TEST_SUITE_BEGIN("runtime");

TEST_CASE_TEMPLATE("staging delivers host and file pieces across buffer boundaries", T,
                   ddo::host_sim_transport, file_reading_sim) {
  piece_set set(31, 25);
  T t;
  ddo::detail::source_files files;
  files.push_back(std::make_unique<ddo::file_reader>(set.path.string()));
  ddo::detail::staging_worker<T> worker;
  worker.prepare(t, 4096, 3, files);
  worker.ensure_buffers();
  CHECK(worker.buffer_bytes() == 2 * 4096);
  auto* device = t.allocate_device(set.span);
  auto stream = t.make_stream();
  const auto v = T::view(stream);
  // at setup: on the calling thread
  const auto copies = worker.stage(device, set.pieces, v);
  CHECK(set.mismatches(t, device, v) == 0);
  if constexpr (ddo::transport_with_file_reads<T>) {
    CHECK(*t.reads == 12);                                 // every file piece read directly
    CHECK(copies < worker.estimate_copies(set.pieces) + 12);
    CHECK(t.pageable_direct_copies() == 0);
  } else {
    CHECK(copies >= set.span / 4096);
    CHECK(t.pageable_direct_copies() == 0);  // every copy came from a staging buffer
  }
  // through the worker thread: a job per "slot", waited on by ticket
  t.fill_device(device, 0xCD, set.span, v);
  t.synchronize(v);
  auto release = t.make_event(false);
  auto ready = t.make_event(false);
  worker.start(2);
  typename ddo::detail::staging_worker<T>::job j;
  j.release = &release;
  j.ready = &ready;
  j.image = device;
  j.pieces = &set.pieces;
  const auto ticket = worker.submit(j);
  CHECK(ticket == 1);
  CHECK(worker.wait_recorded(ticket) >= 0.0);
  CHECK(worker.recorded() == 1);
  t.wait(v, ready);
  CHECK(set.mismatches(t, device, v) == 0);
  worker.stop();
  t.synchronize(worker.stream());
  worker.release();
  t.free_device(device, set.span);
}

TEST_CASE("a staging failure on the worker surfaces on the engine's thread") {
  piece_set set(47, 6);
  ddo::host_sim_transport t;
  ddo::detail::source_files files;
  files.push_back(std::make_unique<ddo::file_reader>(set.path.string(), ddo::safetensors_backend::pread));
  std::filesystem::resize_file(set.path, 10);  // the file is cut short after opening
  ddo::detail::staging_worker<ddo::host_sim_transport> worker;
  worker.prepare(t, 4096, 1, files);
  worker.ensure_buffers();
  auto* device = t.allocate_device(set.span);
  auto release = t.make_event(false);
  auto ready = t.make_event(false);
  worker.start(1);
  ddo::detail::staging_worker<ddo::host_sim_transport>::job j;
  j.release = &release;
  j.ready = &ready;
  j.image = device;
  j.pieces = &set.pieces;
  const auto ticket = worker.submit(j);
  CHECK_THROWS_AS(worker.wait_recorded(ticket), ddo::io_error);
  CHECK_THROWS_AS(worker.rethrow_error(), ddo::io_error);
  CHECK_FALSE(worker.wait_recorded_or_failed(ticket + 1));
  worker.stop();
  t.synchronize(worker.stream());
  worker.release();
  t.free_device(device, set.span);
}

TEST_SUITE_END();
