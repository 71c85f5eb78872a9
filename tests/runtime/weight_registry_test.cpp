// SPDX-License-Identifier: Apache-2.0
// ddo::weight_registry (issue 42): several models' page-locked host copies under one budget —
// shared pieces held once, LRU eviction that never touches a piece in use, keep and the next
// model's hint, admission that names the model to release, files replaced on disk detected by
// identity, concurrent acquires (ThreadSanitizer runs this suite) and a property test.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ddo/memory/weight_registry.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runtime_fixtures.hpp"

namespace weight_registry_test {

using ddo::registry_piece;
using ddo::weight_registry;

const std::uint64_t page = ddo::host_page_size();

/// A "disk" of files whose contents change (each rewrite a new inode: a file replaced on disk).
struct disk {
  std::filesystem::path dir;
  std::map<std::string, std::uint32_t> generation;  // per file name
  explicit disk(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
  }
  ~disk() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  /// Byte @p i of file @p f at generation @p gen.
  static std::byte byte_of(const std::string& f, std::uint32_t gen, std::uint64_t i) {
    return static_cast<std::byte>((std::hash<std::string>{}(f) + gen * 131 + i * 7) & 0xff);
  }
  /// Writes @p f anew (@p bytes), through a rename: a new inode, the identity changes.
  void write(const std::string& f, std::uint64_t bytes) {
    const auto gen = ++generation[f];
    std::vector<char> data(bytes);
    for (std::uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(byte_of(f, gen, i));
    const auto tmp = dir / (f + ".tmp");
    std::ofstream(tmp, std::ios::binary).write(data.data(), static_cast<std::streamsize>(bytes));
    std::filesystem::rename(tmp, dir / f);
  }
  /// The registry key of @p bytes at @p offset of file @p f: path, identity, offset, bytes.
  std::string key(const std::string& f, std::uint64_t offset, std::uint64_t bytes) const {
    struct ::stat st {};
    const auto path = (dir / f).string();
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return path + '@' + std::to_string(st.st_ino) + ':' + std::to_string(st.st_size) + ':' +
           std::to_string(st.st_mtim.tv_nsec) + ':' + std::to_string(offset) + '+' +
           std::to_string(bytes);
  }
};

/// Where a key's bytes are (parsed back from disk::key).
struct key_parts {
  std::string path;
  std::uint64_t offset = 0, bytes = 0;
};
key_parts parse(const std::string& key) {
  key_parts k;
  k.path = key.substr(0, key.find('@'));
  const auto plus = key.rfind('+');
  const auto colon = key.rfind(':', plus);
  k.offset = std::stoull(key.substr(colon + 1, plus - colon - 1));
  k.bytes = std::stoull(key.substr(plus + 1));
  return k;
}

/// Page-locking as a loader sees it, simulated: bytes locked now and at most, and how often
/// blocks were locked and unlocked (a block's unregister runs when it goes).
struct lock_counts {
  std::atomic<std::uint64_t> now{0}, peak{0};
  std::atomic<int> locks{0}, unlocks{0};
  void reset_peak() { peak = now.load(); }
  void lock(ddo::pinned_block& block, const std::shared_ptr<lock_counts>& self) {
    const std::uint64_t bytes = block.size();
    const std::uint64_t held = now += bytes;
    std::uint64_t seen = peak.load();
    while (seen < held && !peak.compare_exchange_weak(seen, held)) {
    }
    ++locks;
    block.set_registered([self, bytes] {
      self->now -= bytes;
      ++self->unlocks;
    });
  }
};

/// A recycling loader reading each piece from its file into a block of its own, or into the
/// evicted block the registry gives for it, "page-locking" the blocks not locked yet
/// (lock_counts); counts its calls.
struct file_loader {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<std::uint64_t>> bytes =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  std::shared_ptr<lock_counts> locked = std::make_shared<lock_counts>();
  std::vector<std::shared_ptr<ddo::pinned_block>> operator()(
      std::span<const registry_piece> pieces,
      std::span<const std::shared_ptr<ddo::pinned_block>> recycled) const {
    ++*calls;
    std::vector<std::shared_ptr<ddo::pinned_block>> out;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const auto& p = pieces[i];
      const auto k = parse(p.key);
      auto block = recycled[i] ? recycled[i] : std::make_shared<ddo::pinned_block>(p.bytes);
      const int fd = ::open(k.path.c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      const auto n = ::pread(fd, block->data(), k.bytes, static_cast<off_t>(k.offset));
      ::close(fd);
      REQUIRE(n == static_cast<ssize_t>(k.bytes));
      if (!block->registered()) locked->lock(*block, locked);
      *bytes += p.bytes;
      out.push_back(std::move(block));
    }
    return out;
  }
};

/// Whether every piece of @p use holds the bytes its file holds now.
bool fresh(const ddo::model_use& use, const disk& d) {
  for (std::size_t i = 0; i < use.keys().size(); ++i) {
    const auto k = parse(use.keys()[i]);
    const auto f = std::filesystem::path(k.path).filename().string();
    const auto gen = d.generation.at(f);
    for (std::uint64_t b = 0; b < k.bytes; b += 97)
      if (use.block(i)->data()[b] != disk::byte_of(f, gen, k.offset + b)) return false;
  }
  return true;
}

/// Pieces of @p n pages each of file @p f (written by the test): @p count of them.
std::vector<registry_piece> pieces_of(const disk& d, const std::string& f, std::size_t count,
                                      std::uint64_t n = 1) {
  std::vector<registry_piece> out;
  for (std::size_t i = 0; i < count; ++i)
    out.push_back({d.key(f, i * n * page, n * page), n * page});
  return out;
}

/// Streams every group of @p off once, comparing each weight with @p m's bytes: mismatches.
template <class Offloader>
std::uint64_t stream_and_check(Offloader& off, ddo::host_sim_transport& sim,
                               const ddo_test::synthetic_model& m) {
  auto s = sim.make_stream();
  const auto v = sim.view(s);
  std::atomic<std::uint64_t> bad{0};
  for (std::size_t g = 0; g < off.group_count(); ++g) {
    auto lease = off.acquire(g, v);
    std::vector<std::pair<const std::byte*, std::size_t>> items;
    for (std::size_t i = 0; i < lease.size(); ++i)
      items.emplace_back(lease.data(i), lease.weight_index(i));
    sim.enqueue(v, [&, items = std::move(items)] {
      for (const auto& [p, w] : items)
        if (std::memcmp(p, m.expected[w].data(), m.expected[w].size()) != 0) ++bad;
    });
  }
  sim.synchronize(v);
  return bad;
}

/// Page-rounded bytes of @p m's pinned weights: what a registry charges for the model.
std::uint64_t pinned_pages(const ddo_test::synthetic_model& m) {
  std::uint64_t bytes = 0;
  for (std::size_t w = 0; w < m.table.size(); ++w)
    if (m.plan.decisions[w].where == ddo::placement::pinned_host && m.table[w].bytes != 0)
      bytes += ddo::round_up(m.table[w].bytes, page);
  return bytes;
}

ddo::runtime_options registry_options(std::shared_ptr<weight_registry> r, std::string model) {
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 64 * 1024;
  o.registry = std::move(r);
  o.registry_model = std::move(model);
  return o;
}

/// The seed of a property test: DDO_PROPERTY_SEED, or a fixed one (printed either way).
std::uint32_t property_seed(std::uint32_t fixed) {
  const char* replay = std::getenv("DDO_PROPERTY_SEED");
  const auto seed = replay != nullptr ? static_cast<std::uint32_t>(std::stoul(replay)) : fixed;
  MESSAGE("seed " << seed << " (replay: DDO_PROPERTY_SEED=" << seed << ")");
  return seed;
}

}  // namespace weight_registry_test

using namespace weight_registry_test;

TEST_CASE("weight_registry: a piece two models share is held once, and reused") {
  disk d("ddo-registry-share");
  d.write("base", 8 * page);
  d.write("lora", 2 * page);
  weight_registry reg(100 * page);
  file_loader load;
  auto a_pieces = pieces_of(d, "base", 8);
  auto b_pieces = pieces_of(d, "base", 8);  // the same tensors, and its own
  for (auto& p : pieces_of(d, "lora", 2)) b_pieces.push_back(p);
  auto a = reg.acquire("A", a_pieces, load);
  CHECK(a.loaded_bytes() == 8 * page);
  auto b = reg.acquire("B", b_pieces, load);
  CHECK(b.loaded_bytes() == 2 * page);
  CHECK(b.reused_bytes() == 8 * page);
  CHECK(reg.pinned_bytes() == 10 * page);
  CHECK(a.block(0).get() == b.block(0).get());  // the same bytes, not a copy
  CHECK(fresh(a, d));
  CHECK(fresh(b, d));
  a.reset();
  b.reset();
  CHECK(reg.pinned_bytes() == 10 * page);  // kept across calls until evicted or released
  reg.release("A");
  CHECK(reg.pinned_bytes() == 10 * page);  // B still lists the shared pieces
  reg.release("B");
  CHECK(reg.pinned_bytes() == 0);
}

TEST_CASE("weight_registry: the least recently used model is evicted, never one in use or kept") {
  disk d("ddo-registry-lru");
  for (const char* f : {"a", "b", "c", "k"}) d.write(f, 4 * page);
  weight_registry reg(8 * page);  // two models of four pages
  file_loader load;
  { auto a = reg.acquire("A", pieces_of(d, "a", 4), load); }
  { auto b = reg.acquire("B", pieces_of(d, "b", 4), load); }
  {
    auto a = reg.acquire("A", pieces_of(d, "a", 4), load);
    CHECK(a.reused_bytes() == 4 * page);
  }
  // A was used last: C evicts B.
  {
    auto c = reg.acquire("C", pieces_of(d, "c", 4), load);
    CHECK(c.loaded_bytes() == 4 * page);
  }
  CHECK(reg.held_bytes(pieces_of(d, "a", 4)) == 4 * page);
  CHECK(reg.held_bytes(pieces_of(d, "b", 4)) == 0);
  CHECK(reg.stats().evicted_bytes == 4 * page);
  // The hint keeps the next model over an older one: A is older than C, but hinted.
  reg.hint_next("A");
  { auto b = reg.acquire("B", pieces_of(d, "b", 4), load); }
  CHECK(reg.held_bytes(pieces_of(d, "a", 4)) == 4 * page);
  CHECK(reg.held_bytes(pieces_of(d, "c", 4)) == 0);
  // In use: A's use lives; kept: B. K finds no room and names both, having done nothing.
  auto a = reg.acquire("A", pieces_of(d, "a", 4), load);
  reg.keep("B");
  const auto calls = load.calls->load();
  try {
    (void)reg.acquire("K", pieces_of(d, "k", 4), load);
    FAIL("the acquire did not throw");
  } catch (const ddo::registry_full& e) {
    CHECK(e.models_to_release() == std::vector<std::string>{"B", "A"});
    CHECK(std::string(e.what()).find("'A' (in use)") != std::string::npos);
    CHECK(std::string(e.what()).find("'B' (kept)") != std::string::npos);
  }
  CHECK(load.calls->load() == calls);
  CHECK(reg.pinned_bytes() == 8 * page);
  reg.keep("B", false);
  { auto k = reg.acquire("K", pieces_of(d, "k", 4), load); }  // B goes, A (in use) stays
  CHECK(fresh(a, d));
  CHECK(reg.held_bytes(pieces_of(d, "b", 4)) == 0);
  // Larger than the whole budget: no model to release would help.
  d.write("big", 9 * page);
  try {
    (void)reg.acquire("big", pieces_of(d, "big", 9), load);
    FAIL("the acquire did not throw");
  } catch (const ddo::registry_full& e) {
    CHECK(e.models_to_release().empty());
    CHECK(std::string(e.what()).find("more than the whole pinned-RAM budget") != std::string::npos);
  }
  a.reset();
  for (const char* m : {"A", "B", "C", "K"}) reg.release(m);
  CHECK(reg.pinned_bytes() == 0);
  CHECK(reg.stats().peak_pinned_bytes <= 8 * page);
}

TEST_CASE("weight_registry: a copy in flight pins its piece; a failed load keeps nothing") {
  disk d("ddo-registry-flight");
  d.write("a", 2 * page);
  d.write("b", 2 * page);
  weight_registry reg(2 * page);
  file_loader load;
  { auto a = reg.acquire("A", pieces_of(d, "a", 2), load); }
  auto copy = reg.use_piece(pieces_of(d, "a", 1)[0].key);  // enqueued; its event not done yet
  REQUIRE(copy);
  CHECK(copy.data()[5] == disk::byte_of("a", 1, 5));
  CHECK_THROWS_AS((void)reg.acquire("B", pieces_of(d, "b", 2), load), ddo::registry_full);
  copy.release();  // the copy's event completed
  {
    auto b = reg.acquire("B", pieces_of(d, "b", 2), load);
    CHECK(fresh(b, d));
  }
  CHECK_FALSE(reg.use_piece("no such key"));
  // A loader that fails: nothing of the call stays (the eviction it needed stays done).
  const auto before = reg.pinned_bytes();
  CHECK_THROWS_AS(
      (void)reg.acquire(
          "A", pieces_of(d, "a", 2),
          [](std::span<const registry_piece>) -> std::vector<std::shared_ptr<ddo::pinned_block>> {
            throw ddo::io_error("a", 5, "read failed");
          }),
      ddo::io_error);
  CHECK(reg.pinned_bytes() <= before);
  CHECK(reg.held_bytes(pieces_of(d, "a", 2)) == 0);
  CHECK_THROWS_AS(reg.keep("nobody"), ddo::usage_error);
  reg.release("A");
  reg.release("B");
  CHECK(reg.pinned_bytes() == 0);
}

TEST_CASE("weight_registry: a switch reads into the evicted model's page-locked blocks") {
  // Budget for one model of four pages. B of A's shape takes A's evicted blocks (locked once,
  // never unlocked); a block someone still holds is not handed on; pieces of another size get
  // new blocks, locked only after the evicted ones were unlocked (never above the budget).
  disk d("ddo-registry-recycle");
  for (const char* f : {"a", "b", "c", "e"}) d.write(f, 4 * page);
  weight_registry reg(4 * page);
  file_loader load;
  auto& locked = *load.locked;
  std::set<const std::byte*> a_pages;
  {
    auto a = reg.acquire("A", pieces_of(d, "a", 4), load);
    for (std::size_t i = 0; i < 4; ++i) a_pages.insert(a.block(i)->data());
  }
  CHECK(locked.locks == 4);
  {
    auto b = reg.acquire("B", pieces_of(d, "b", 4), load);
    CHECK(b.loaded_bytes() == 4 * page);
    CHECK(b.recycled_bytes() == 4 * page);
    CHECK(fresh(b, d));  // B's bytes, not A's, in A's pages
    for (std::size_t i = 0; i < 4; ++i) CHECK(a_pages.contains(b.block(i)->data()));
  }
  CHECK(locked.locks == 4);
  CHECK(locked.unlocks == 0);
  CHECK(locked.peak.load() == 4 * page);
  CHECK(reg.stats().evicted_bytes == 4 * page);
  CHECK(reg.stats().recycled_bytes == 4 * page);
  {
    auto a = reg.acquire("A", pieces_of(d, "a", 4), load);  // B's blocks back to A
    CHECK(a.recycled_bytes() == 4 * page);
    auto held = a.block(0);  // held past the use (as a copy in flight would be)
    a.reset();
    auto b = reg.acquire("B", pieces_of(d, "b", 4), load);
    CHECK(b.recycled_bytes() == 3 * page);
    CHECK(b.block(0)->data() != held->data());
    CHECK(fresh(b, d));
    CHECK(held->data()[7] == disk::byte_of("a", 1, 7));  // still A's bytes: never overwritten
  }
  CHECK(locked.locks == 5);
  CHECK(locked.unlocks == 1);
  locked.reset_peak();  // (the held block was locked beside the budget, outside the registry)
  // Pieces of two pages: no one-page block holds one; B's four are unlocked first.
  std::vector<registry_piece> c{{d.key("c", 0, 2 * page), 2 * page},
                                {d.key("c", 2 * page, 2 * page), 2 * page}};
  {
    auto cu = reg.acquire("C", c, load);
    CHECK(cu.recycled_bytes() == 0);
  }
  CHECK(locked.locks == 7);
  CHECK(locked.unlocks == 5);
  // One two-page piece and two of one page over C's blocks: one recycled, the other unlocked
  // (beside the recycled read) before the one-page pieces are locked.
  std::vector<registry_piece> e{{d.key("e", 0, 2 * page), 2 * page},
                                {d.key("e", 2 * page, page), page},
                                {d.key("e", 3 * page, page), page}};
  {
    auto eu = reg.acquire("E", e, load);
    CHECK(eu.recycled_bytes() == 2 * page);
    CHECK(fresh(eu, d));
  }
  CHECK(locked.locks == 9);
  CHECK(locked.unlocks == 6);
  CHECK(locked.peak.load() == 4 * page);
  for (const char* m : {"A", "B", "C", "E"}) reg.release(m);
  CHECK(reg.pinned_bytes() == 0);
  CHECK(locked.now.load() == 0);
}

TEST_CASE("weight_registry: offloaders of one shape switch without unpinning or pinning") {
  // Two models of one shape, different bytes (an engine's two checkpoints), under a budget for
  // one and a half: B's setup reads into A's evicted pages, page-locked still, where the old
  // registry unregistered them and registered new ones; every streamed byte is B's.
  ddo_test::model_spec spec;
  spec.groups = 4;
  spec.min_bytes = 8 * 1024;
  spec.max_bytes = 64 * 1024;
  spec.seed = 4221;
  auto a = ddo_test::make_model(spec);
  auto b = ddo_test::make_model(spec);
  b->table = ddo_test::reload_in_place(*b, 4222);  // the same shapes, other bytes
  const std::uint64_t budget = pinned_pages(*a) * 3 / 2;
  auto reg = std::make_shared<weight_registry>(budget);
  ddo::host_sim_options ho;
  ho.device_capacity_bytes = 8 * ddo::mib;
  ddo::host_sim_transport sim(ho);
  using offloader = ddo::basic_offloader<ddo::host_sim_transport>;
  const auto registered = [&] { return sim.ledger().counts(ddo::ledger_kind::registered); };
  auto off = std::make_unique<offloader>(sim, a->table, a->plan, registry_options(reg, "A"));
  CHECK(stream_and_check(*off, sim, *a) == 0);
  for (int i = 0; i < 3; ++i) {  // A -> B -> A -> B
    const auto& to = i % 2 == 0 ? *b : *a;
    off.reset();
    const auto before = registered();
    const auto stats0 = reg->stats();
    off = std::make_unique<offloader>(sim, to.table, to.plan,
                                      registry_options(reg, i % 2 == 0 ? "B" : "A"));
    const auto after = registered();
    const auto stats1 = reg->stats();
    const auto evicted = stats1.evicted_bytes - stats0.evicted_bytes;
    CHECK(evicted > 0);
    CHECK(stats1.recycled_bytes - stats0.recycled_bytes == evicted);
    CHECK(after.frees == before.frees);  // nothing unregistered ...
    // ... and registered only what no evicted page held
    CHECK(after.bytes_allocated - before.bytes_allocated ==
          stats1.pinned_bytes - stats0.pinned_bytes);
    CHECK(stream_and_check(*off, sim, to) == 0);
    CHECK(sim.pageable_direct_copies() == 0);
  }
  CHECK(sim.ledger().peak(ddo::ledger_kind::registered) <= budget);
  CHECK(reg->stats().peak_pinned_bytes <= budget);
  off.reset();
  reg->release("A");
  reg->release("B");
  CHECK(reg->pinned_bytes() == 0);
  CHECK(sim.registered_bytes_in_use() == 0);
}

TEST_CASE("weight_registry: a file replaced on disk is read again, never served stale") {
  disk d("ddo-registry-stale");
  d.write("m", 3 * page);
  weight_registry reg;
  file_loader load;
  {
    auto a = reg.acquire("M", pieces_of(d, "m", 3), load);
    CHECK(fresh(a, d));
  }
  d.write("m", 3 * page);  // replaced between runs: same path, same size, new bytes
  auto a = reg.acquire("M", pieces_of(d, "m", 3), load);
  CHECK(a.loaded_bytes() == 3 * page);
  CHECK(a.reused_bytes() == 0);
  CHECK(fresh(a, d));
  CHECK(reg.pinned_bytes() == 3 * page);  // the old copy went with its identity
  a.reset();
  reg.release("M");
  CHECK(reg.pinned_bytes() == 0);
}

TEST_CASE("weight_registry: set_budget evicts unused models, refuses below what is in use") {
  disk d("ddo-registry-budget");
  d.write("a", 2 * page);
  d.write("b", 2 * page);
  weight_registry reg;
  file_loader load;
  auto a = reg.acquire("A", pieces_of(d, "a", 2), load);
  { auto b = reg.acquire("B", pieces_of(d, "b", 2), load); }
  CHECK_THROWS_AS(reg.set_budget(page), ddo::registry_full);
  CHECK(reg.budget() == std::numeric_limits<std::uint64_t>::max());
  CHECK(reg.pinned_bytes() == 4 * page);
  reg.set_budget(2 * page);
  CHECK(reg.pinned_bytes() == 2 * page);
  CHECK(fresh(a, d));
  a.reset();
  reg.release("A");
  reg.release("B");
  CHECK(reg.pinned_bytes() == 0);
}

TEST_CASE("weight_registry: the process-wide instance is one object") {
  CHECK(ddo::process_weight_registry().get() == ddo::process_weight_registry().get());
  CHECK(ddo::process_weight_registry()->budget() == std::numeric_limits<std::uint64_t>::max());
}

TEST_CASE("weight_registry: property: random loads, switches, keeps and releases") {
  // Random model sizes over a few files (so models share pieces), uses held across steps (an
  // engine running two models), keeps, hints, releases and files replaced on disk. After every
  // step: the budget kept, every live use's bytes those on disk now; at the end, nothing pinned.
  std::mt19937 rng(property_seed(42042));
  disk d("ddo-registry-property");
  const std::vector<std::string> files{"f0", "f1", "f2", "f3"};
  for (const auto& f : files) d.write(f, 16 * page);
  const std::uint64_t budget = (12 + rng() % 12) * page;
  weight_registry reg(budget);
  file_loader load;
  struct model {
    std::string name;
    std::vector<std::pair<std::string, std::uint64_t>> at;  // (file, first page) per piece
    std::uint64_t pages = 1;
  };
  std::vector<model> models(5);
  for (std::size_t m = 0; m < models.size(); ++m) {
    models[m].name = "model" + std::to_string(m);
    models[m].pages = 1 + rng() % 3;
    const std::size_t n = 1 + rng() % 4;
    for (std::size_t i = 0; i < n; ++i)
      models[m].at.emplace_back(files[rng() % files.size()], (rng() % 5) * models[m].pages);
  }
  auto pieces = [&](const model& m) {
    std::vector<registry_piece> out;
    for (const auto& [f, first] : m.at)
      out.push_back({d.key(f, first * page, m.pages * page), m.pages * page});
    return out;
  };
  std::map<std::size_t, ddo::model_use> live;  // model index -> its use (at most two live)
  std::set<std::string> kept;
  std::size_t refused = 0;
  for (int step = 0; step < 400; ++step) {
    const std::size_t m = rng() % models.size();
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2:  // switch to m: the previous model's use ends unless it stays live (two at once)
        if (live.size() >= 2) live.erase(live.begin());
        try {
          live[m] = reg.acquire(models[m].name, pieces(models[m]), load);
        } catch (const ddo::registry_full& e) {
          ++refused;
          // Only models in use or kept are named (a released one still in use among them).
          for (const auto& name : e.models_to_release()) {
            CHECK(name != models[m].name);
            const bool in_use = std::any_of(live.begin(), live.end(), [&](const auto& kv) {
              return models[kv.first].name == name;
            });
            CHECK((in_use || kept.contains(name)));
          }
          live.erase(m);
        }
        break;
      case 3:
        live.erase(m);
        break;
      case 4:
        if (reg.holds_model(models[m].name)) {
          const bool on = rng() % 2 == 0;
          reg.keep(models[m].name, on);
          if (on)
            kept.insert(models[m].name);
          else
            kept.erase(models[m].name);
        }
        break;
      case 5:
        reg.hint_next(models[m].name);
        break;
      case 6:
        if (reg.holds_model(models[m].name)) reg.release(models[m].name);
        kept.erase(models[m].name);
        break;
      default: {  // a file replaced on disk between runs (same size, new bytes and identity)
        const auto& f = files[rng() % files.size()];
        std::erase_if(live, [&](const auto& kv) {  // its users stop (an engine reloads)
          for (const auto& [file, first] : models[kv.first].at)
            if (file == f) return true;
          return false;
        });
        d.write(f, 16 * page);
      }
    }
    REQUIRE(reg.pinned_bytes() <= budget);
    for (const auto& [i, use] : live) REQUIRE(fresh(use, d));
  }
  MESSAGE("refused " << refused << " of the loads; loaded " << reg.stats().loaded_bytes
                     << " bytes, reused " << reg.stats().reused_bytes << ", recycled "
                     << reg.stats().recycled_bytes);
  CHECK(reg.stats().peak_pinned_bytes <= budget);
  // Page-locked bytes, not only the ledger: recycled blocks stay locked, the others are unlocked
  // before new pages are locked.
  CHECK(load.locked->peak.load() <= budget);
  live.clear();
  for (const auto& m : models)
    if (reg.holds_model(m.name)) reg.release(m.name);
  CHECK(reg.pinned_bytes() == 0);
  CHECK(reg.stats().pieces == 0);
  CHECK(load.locked->now.load() == 0);
}

TEST_CASE("weight_registry: concurrent offloaders ask for the budget at once") {
  // Threads acquire models (some sharing a file) under a budget for about two of them, hold
  // them a moment (copies reading the bytes), release, and switch again; a refusal is answered
  // by letting go and retrying. Races are ThreadSanitizer's to find; the budget and the bytes
  // are checked here.
  disk d("ddo-registry-concurrent");
  for (const char* f : {"a", "b", "c", "d"}) d.write(f, 4 * page);
  weight_registry reg(9 * page);
  file_loader load;
  const std::vector<std::vector<registry_piece>> model_pieces{
      pieces_of(d, "a", 4), pieces_of(d, "b", 4), pieces_of(d, "c", 4), pieces_of(d, "d", 4),
      pieces_of(d, "a", 2)};  // the last shares A's first two pieces
  std::atomic<int> served{0}, refused{0}, stale{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<std::uint32_t>(t + 1));
      for (int i = 0; i < 40; ++i) {
        const std::size_t m = rng() % model_pieces.size();
        try {
          auto use = reg.acquire("M" + std::to_string(m), model_pieces[m], load);
          ++served;
          for (std::size_t p = 0; p < use.keys().size(); ++p)
            if (use.block(p)->data()[page - 1] !=
                disk::byte_of(std::string(1, static_cast<char>('a' + (m == 4 ? 0 : m))), 1,
                              p * page + page - 1))
              ++stale;
          if (i % 7 == 0) reg.hint_next("M" + std::to_string(rng() % model_pieces.size()));
        } catch (const ddo::registry_full&) {
          ++refused;
          std::this_thread::yield();
        }
        if (reg.pinned_bytes() > 9 * page) ++stale;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(stale.load() == 0);
  CHECK(served.load() > 0);
  MESSAGE("served " << served.load() << ", refused " << refused.load());
  CHECK(reg.stats().peak_pinned_bytes <= 9 * page);
  for (std::size_t m = 0; m < model_pieces.size(); ++m)
    if (reg.holds_model("M" + std::to_string(m))) reg.release("M" + std::to_string(m));
  CHECK(reg.pinned_bytes() == 0);
}

TEST_CASE("weight_registry: a user destroyed mid-use on another thread leaves it consistent") {
  // An offloader's model_use goes on its own thread while another thread waits for its room:
  // the waiting acquire is refused until then, and succeeds after without a byte leaked.
  disk d("ddo-registry-midway");
  d.write("a", 4 * page);
  d.write("b", 4 * page);
  weight_registry reg(4 * page);
  file_loader load;
  auto a = std::make_unique<ddo::model_use>(reg.acquire("A", pieces_of(d, "a", 4), load));
  std::atomic<bool> gone{false};
  std::thread owner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    a.reset();  // the offloader is destroyed (its copies synchronised first)
    gone = true;
  });
  int refusals = 0;
  ddo::model_use b;
  while (!b) {
    try {
      b = reg.acquire("B", pieces_of(d, "b", 4), load);
    } catch (const ddo::registry_full& e) {
      ++refusals;
      CHECK(e.models_to_release() == std::vector<std::string>{"A"});
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  owner.join();
  CHECK(gone.load());
  CHECK(fresh(b, d));
  CHECK(reg.pinned_bytes() == 4 * page);
  b.reset();
  reg.release("A");
  reg.release("B");
  CHECK(reg.pinned_bytes() == 0);
}

TEST_CASE("weight_registry: offloaders of two models take their host bytes from one budget") {
  // Budget for one model and a half: B is refused while A's offloader lives (naming A, nothing
  // pinned for B), fits once it went (A's pieces evicted), and a second offloader of B reads
  // nothing. Every streamed byte is the model's; after the releases nothing is pinned.
  ddo_test::model_spec spec;
  spec.groups = 4;
  spec.min_bytes = 8 * 1024;
  spec.max_bytes = 64 * 1024;
  spec.seed = 4201;
  auto a = ddo_test::make_model(spec);
  spec.seed = 4202;
  auto b = ddo_test::make_model(spec);
  const std::uint64_t budget = std::max(pinned_pages(*a), pinned_pages(*b)) * 3 / 2;
  auto reg = std::make_shared<weight_registry>(budget);
  ddo::host_sim_options ho;
  ho.device_capacity_bytes = 8 * ddo::mib;
  ddo::host_sim_transport sim(ho);
  using offloader = ddo::basic_offloader<ddo::host_sim_transport>;
  auto off_a = std::make_unique<offloader>(sim, a->table, a->plan, registry_options(reg, "A"));
  CHECK(stream_and_check(*off_a, sim, *a) == 0);
  CHECK(reg->pinned_bytes() == pinned_pages(*a));
  CHECK(off_a->metrics().pinned_bytes == pinned_pages(*a));
  const auto registered_a = sim.registered_bytes_in_use();
  try {
    offloader off_b(sim, b->table, b->plan, registry_options(reg, "B"));
    FAIL("B was admitted beside A");
  } catch (const ddo::registry_full& e) {
    CHECK(e.models_to_release() == std::vector<std::string>{"A"});
  }
  CHECK(sim.registered_bytes_in_use() == registered_a);  // nothing of B left behind
  off_a.reset();  // A's offloader goes: its model is unused, evictable
  {
    offloader off_b(sim, b->table, b->plan, registry_options(reg, "B"));
    CHECK(stream_and_check(off_b, sim, *b) == 0);
    const auto loaded = reg->stats().loaded_bytes;
    offloader off_b2(sim, b->table, b->plan, registry_options(reg, "B"));
    CHECK(reg->stats().loaded_bytes == loaded);  // the same model: held once, read once
    CHECK(stream_and_check(off_b2, sim, *b) == 0);
    CHECK(reg->stats().evicted_bytes > 0);
    CHECK(reg->pinned_bytes() <= budget);
  }
  CHECK(reg->stats().peak_pinned_bytes <= budget);
  reg->release("A");
  reg->release("B");
  CHECK(reg->pinned_bytes() == 0);
  CHECK(sim.registered_bytes_in_use() == 0);
  CHECK(sim.device_bytes_in_use() == 0);
}

TEST_CASE("weight_registry: an offloader destroyed on its thread while another model waits") {
  // Model A's offloader streams on one thread and goes; model B's setup on another is refused
  // (naming A) until then, and admitted after, its bytes right, nothing of a refused setup kept.
  ddo_test::model_spec spec;
  spec.groups = 3;
  spec.min_bytes = 8 * 1024;
  spec.max_bytes = 32 * 1024;
  spec.seed = 4211;
  auto a = ddo_test::make_model(spec);
  spec.seed = 4212;
  auto b = ddo_test::make_model(spec);
  const std::uint64_t budget = std::max(pinned_pages(*a), pinned_pages(*b)) * 3 / 2;
  auto reg = std::make_shared<weight_registry>(budget);
  auto host = std::make_shared<ddo::host_sim_host>();
  ddo::host_sim_options ho;
  ho.device_capacity_bytes = 8 * ddo::mib;
  ho.host = host;
  ddo::host_sim_transport sim_a(ho), sim_b(ho);
  using offloader = ddo::basic_offloader<ddo::host_sim_transport>;
  auto off_a = std::make_unique<offloader>(sim_a, a->table, a->plan, registry_options(reg, "A"));
  std::atomic<std::uint64_t> bad_a{1};
  std::thread owner([&] {
    bad_a = stream_and_check(*off_a, sim_a, *a);
    off_a.reset();
  });
  std::unique_ptr<offloader> off_b;
  int refusals = 0;
  while (!off_b) {
    try {
      off_b = std::make_unique<offloader>(sim_b, b->table, b->plan, registry_options(reg, "B"));
    } catch (const ddo::registry_full& e) {
      ++refusals;
      CHECK(e.models_to_release() == std::vector<std::string>{"A"});
      CHECK(sim_b.registered_bytes_in_use() == 0);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
  owner.join();
  MESSAGE("B refused " << refusals << " time(s) while A's offloader lived");
  CHECK(bad_a.load() == 0);
  CHECK(stream_and_check(*off_b, sim_b, *b) == 0);
  CHECK(reg->stats().peak_pinned_bytes <= budget);
  off_b.reset();
  reg->release("A");
  reg->release("B");
  CHECK(reg->pinned_bytes() == 0);
  CHECK(sim_a.registered_bytes_in_use() + sim_b.registered_bytes_in_use() == 0);
}
