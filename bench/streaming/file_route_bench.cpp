// SPDX-License-Identifier: Apache-2.0
// The streaming benchmark's file-route variant (transport/nvme.hpp): a model streamed from its
// file, cold cache, judged against the raw read bandwidth of the same file measured in the same
// run. Both sides use the same request size, the same reader threads and the same two buffers
// of one group each:
//   raw   = better of O_DIRECT and buffered reads of the whole file (parallel_reader, no copy);
//   ddo   = one step of the offloader over nvme_transport: every group acquired in order, the
//           bytes read into its pinned staging slots and copied to the device;
//   ratio = ddo bytes/s ÷ raw bytes/s (target ≥ 0.90), each the median of --passes cold passes.
// Cold: page cache dropped before every pass (`echo 3 > /proc/sys/vm/drop_caches` after sync,
// where permitted; otherwise posix_fadvise(POSIX_FADV_DONTNEED) on the file — the table says
// which). Without a GPU (or with --host-sim) the device is host_sim's: the reads are the same,
// the copies are memcpy.
//
// Output: a Markdown table on stdout and, with --json FILE, the numbers as JSON.
// Exit status: 0 ok (target met or not: the table says), 1 failure, 2 usage.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_arguments.hpp"
#include "bench_setup.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/host_buffer.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"

namespace {

struct options {
  std::string dir = ".";
  double gib = 4.0;              // file size
  // MiB per weight, cycled over the weights (a Flux MLP matrix is 72 MiB; a FLUX single
  // block's pieces 18,18,18,54,72,90: q, k, v, the norm's linear, the MLP, the output).
  std::vector<std::uint64_t> weight_mib{72};
  std::size_t per_group = 4;      // weights per group
  std::size_t threads = 8;
  std::uint64_t request_mib = 8;
  int passes = 3;
  bool host_sim = false;
  bool keep_file = false;
  bool global_drop = true;  // --drop fadvise: only the file's pages (shared machines)
  std::string json;
};

constexpr const char* program = "file_route_bench";

options parse(int argc, char** argv) {
  namespace po = boost::program_options;
  options o;
  std::string drop = "auto";
  po::options_description desc("options");
  desc.add_options()("dir", po::value<std::string>(&o.dir)->value_name("DIR"),
                     "where the model file is written (not a tmpfs; default .)")(
      "gib", po::value<std::string>()->value_name("G"), "file size in GiB (default 4)")(
      "weight-mib", po::value<std::string>()->value_name("M"),
      "MiB per weight, or a list cycled over the weights (18,18,18,54,72,90; default 72)")(
      "per-group", po::value<std::string>()->value_name("N"), "weights per group (default 4)")(
      "threads", po::value<std::string>()->value_name("T"), "reader threads (default 8)")(
      "request-mib", po::value<std::string>()->value_name("R"), "MiB per read request (default 8)")(
      "passes", po::value<std::string>()->value_name("P"), "cold passes, median taken (default 3)")(
      "host-sim", po::bool_switch(&o.host_sim), "host_sim's device even where a GPU is present")(
      "keep-file", po::bool_switch(&o.keep_file), "keep the model file afterwards")(
      "drop", po::value<std::string>(&drop)->value_name("auto|fadvise"),
      "how the page cache is dropped (default auto: drop_caches where permitted)")(
      "json", po::value<std::string>(&o.json)->value_name("FILE"), "write the numbers as JSON");
  const auto vm = ddo_bench::parse_or_exit(
      program, argc, argv, desc,
      "[--dir DIR (not a tmpfs)] [--gib 4] [--weight-mib 72] [--per-group 4] [--threads 8] "
      "[--request-mib 8] [--passes 3] [--host-sim] [--keep-file] [--drop auto|fadvise] "
      "[--json FILE]");
  o.gib = ddo_bench::real_or(program, vm, "gib", o.gib, 0.0625, 1024);
  if (vm.count("weight-mib")) {
    o.weight_mib.clear();
    std::stringstream list(vm["weight-mib"].as<std::string>());
    std::string item;
    while (std::getline(list, item, ',')) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 1 || v > 4096)
        ddo_bench::usage_exit(program,
                              "--weight-mib: '" + item + "' is not a whole MiB in 1..4096");
      o.weight_mib.push_back(v);
    }
    if (o.weight_mib.empty()) ddo_bench::usage_exit(program, "--weight-mib: no size given");
  }
  o.per_group = static_cast<std::size_t>(ddo_bench::number_or(program, vm, "per-group", 4, 1, 64));
  o.threads = static_cast<std::size_t>(ddo_bench::number_or(program, vm, "threads", 8, 1, 64));
  o.request_mib =
      static_cast<std::uint64_t>(ddo_bench::number_or(program, vm, "request-mib", 8, 1, 256));
  o.passes = static_cast<int>(ddo_bench::number_or(program, vm, "passes", 3, 1, 15));
  if (drop != "auto" && drop != "fadvise")
    ddo_bench::usage_exit(program, "--drop = '" + drop + "': expected auto or fadvise");
  o.global_drop = drop == "auto";
  return o;
}

/// The first group's bytes (the weight sizes cycle over the weights).
std::uint64_t first_group_bytes(const options& o) {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < o.per_group; ++i)
    bytes += o.weight_mib[i % o.weight_mib.size()] * ddo::mib;
  return bytes;
}

/// "18,18,18,54,72,90": the weight sizes in MiB.
std::string weight_sizes(const options& o) {
  std::string sizes;
  for (const auto v : o.weight_mib) sizes += (sizes.empty() ? "" : ",") + std::to_string(v);
  return sizes;
}

/// The run's first line: the device, the file and the read settings.
void print_header(const options& o, const std::string& device, const std::string& path,
                  std::uint64_t file_bytes) {
  std::printf("file_route_bench: %s, file %s (%.2f GB), %zu reader threads, %llu MiB requests, "
              "groups of %zu x %s MiB, %d cold passes\n",
              device.c_str(), path.c_str(), static_cast<double>(file_bytes) / 1e9, o.threads,
              static_cast<unsigned long long>(o.request_mib), o.per_group, weight_sizes(o).c_str(),
              o.passes);
}

/// A field of /proc/self/status or /proc/meminfo in bytes ("VmRSS:", "Cached:"); 0 if absent.
std::uint64_t proc_kib_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
  return 0;
}

/// Bytes of @p path resident in the page cache (mincore over a mapping that is never touched,
/// so it faults nothing in): the file's own pages, which "Cached:" in /proc/meminfo mixes with
/// shared memory — and pinned memory from cudaHostAlloc is counted there too (Shmem), so the
/// route's pinned staging slots would read as page-cache growth.
std::uint64_t file_cached_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ddo::io_error(path, errno, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    return 0;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw ddo::io_error(path, errno, "cannot map '" + path + "' for mincore");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  const int rc = ::mincore(map, size, resident.data());
  const int e = errno;
  ::munmap(map, size);
  if (rc != 0) throw ddo::io_error(path, e, "mincore of '" + path + "' failed: " + std::strerror(e));
  std::uint64_t pages = 0;
  for (const unsigned char r : resident) pages += r & 1u;
  return pages * page;
}

/// Resets the process's peak RSS (VmHWM) to its current RSS; false where the kernel refuses.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return f.good();
}

/// Host memory during one ddo pass: peak RSS above the RSS at its start (after the transport,
/// and with it CUDA, was made), the page cache's growth, and what the route may hold.
struct memory_pass {
  std::uint64_t rss_growth = 0;
  std::int64_t cache_growth = 0;      // "Cached:" of /proc/meminfo (file pages and Shmem)
  std::int64_t shmem_growth = 0;      // "Shmem:" (pinned memory shows here on a GPU machine)
  std::int64_t file_cache_growth = 0; // the model file's own resident pages (mincore)
  std::uint64_t staging = 0;     // the two pinned slots
  std::uint64_t sim_device = 0;  // host_sim's device memory is host memory (0 on a GPU)
  bool peak_reset = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Writes @p bytes of random data (a fresh pattern per 64 MiB) and syncs it to the disk.
void write_file(const std::string& path, std::uint64_t bytes) {
  const std::uint64_t chunk = 64 * ddo::mib;
  std::vector<std::uint64_t> buf(chunk / 8);
  std::mt19937_64 rng(7);
  for (auto& x : buf) x = rng();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw ddo::io_error(path, errno, "cannot create '" + path + "': " + std::strerror(errno));
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    buf[0] ^= off;  // every chunk differs
    const std::size_t n = static_cast<std::size_t>(std::min(chunk, bytes - off));
    const auto* p = reinterpret_cast<const char*>(buf.data());
    for (std::size_t done = 0; done < n;) {
      const ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(off + done));
      if (w <= 0) {
        const int e = errno;
        ::close(fd);
        throw ddo::io_error(path, e, "cannot write '" + path + "': " + std::strerror(e));
      }
      done += static_cast<std::size_t>(w);
    }
  }
  ::fsync(fd);
  ::close(fd);
}

/// Drops the page cache (whole system where permitted, else the file's pages); returns how.
std::string drop_cache(const std::string& path, bool global) {
  ::sync();
  if (std::FILE* f = global ? std::fopen("/proc/sys/vm/drop_caches", "w") : nullptr) {
    const bool ok = std::fputs("3\n", f) >= 0;
    if (std::fclose(f) == 0 && ok) return "drop_caches";
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fdatasync(fd);
    const int r = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (r == 0) return "posix_fadvise DONTNEED";
  }
  return "none (page cache may be warm)";
}

/// Raw reads of the whole file, group by group into two buffers of one group, the same way the
/// file route fills its staging slots (no copy): bytes/s.
double raw_pass(const options& o, const std::string& path, bool direct, std::uint64_t group_bytes,
                std::uint64_t file_bytes, std::string* mode) {
  const ddo::file_reader f(path, ddo::safetensors_backend::pread, {.direct_io = direct});
  const bool d = direct && f.direct_io_active();
  *mode = d ? "O_DIRECT" : "buffered";
  ddo::host_buffer a(group_bytes), b(group_bytes);
  ddo::parallel_reader reader(o.threads, o.request_mib * ddo::mib);
  const auto t0 = std::chrono::steady_clock::now();
  int k = 0;
  for (std::uint64_t off = 0; off < file_bytes; off += group_bytes, k ^= 1) {
    ddo::read_task r;
    r.file = &f;
    r.file_offset = off;
    r.dst = k ? b.data() : a.data();
    r.bytes = r.required = std::min(group_bytes, file_bytes - off);
    r.direct = d;
    if (d) r.bytes = ddo::round_up(r.bytes, ddo::direct_io_alignment);
    reader.run(std::span<const ddo::read_task>(&r, 1));
  }
  return static_cast<double>(file_bytes) / seconds_since(t0);
}

/// The file laid out as a model: weights of weight_mib, per_group to a group, all streamed from
/// the file (placement file).
struct file_model {
  std::string path;
  ddo::weight_table table;
  std::vector<ddo::execution_group> groups;
  std::uint64_t bytes = 0;
  std::uint64_t largest_group = 0;
};

file_model make_model(const options& o, const std::string& path, std::uint64_t file_bytes) {
  file_model m;
  m.path = path;
  const std::size_t f = m.table.add_file(path);
  std::size_t n = 0;
  for (std::uint64_t off = 0;; ++n) {
    const std::uint64_t w_bytes = o.weight_mib[n % o.weight_mib.size()] * ddo::mib;
    if (off + w_bytes > file_bytes) break;
    const std::size_t g = n / o.per_group;
    if (g == m.groups.size()) {
      m.groups.emplace_back();
      m.groups.back().name = "blocks." + std::to_string(g);
      m.groups.back().is_block = true;
    }
    ddo::weight_info w;
    w.name = "blocks." + std::to_string(g) + ".w" + std::to_string(n % o.per_group) + ".weight";
    w.kind = ddo::module_kind::linear;
    w.type = ddo::dtype::u8;
    w.shape = {static_cast<std::int64_t>(w_bytes)};
    w.bytes = w_bytes;
    w.source = ddo::file_source{f, off};
    m.groups[g].weights.push_back(m.table.add(w));
    m.bytes += w_bytes;
    off += w_bytes;
  }
  for (const auto& g : m.groups) {
    std::uint64_t bytes = 0;
    for (std::size_t w : g.weights) bytes += m.table[w].bytes;
    m.largest_group = std::max(m.largest_group, bytes);
  }
  return m;
}

/// One cold step of ddo over the file route: every group acquired in order on one stream; the
/// time ends when the last copy completed. A fresh offloader per pass, so nothing read before
/// the cache drop is carried over (its setup is not timed).
template <class Inner>
double ddo_pass(const options& o, const file_model& m, Inner inner, std::string* description,
                memory_pass* mem) {
  const std::uint64_t rss0 = proc_kib_field("/proc/self/status", "VmRSS:");
  const std::uint64_t cache0 = proc_kib_field("/proc/meminfo", "Cached:");
  const std::uint64_t shmem0 = proc_kib_field("/proc/meminfo", "Shmem:");
  const std::uint64_t file0 = file_cached_bytes(m.path);
  mem->peak_reset = reset_peak_rss();
  ddo::nvme_options no;
  no.staging_slot_bytes = ddo::round_up(m.largest_group, 4096);
  no.read_threads = o.threads;
  no.request_bytes = o.request_mib * ddo::mib;
  using T = ddo::nvme_transport<Inner>;
  T t(std::move(inner), no);
  // Through the one call (bench_setup.hpp): every weight streamed from its file.
  auto setup = ddo_bench::placement_setup(m.groups, ddo::placement::file);
  setup.runtime.slot_count = 3;
  setup.runtime.prefetch_depth = 2;
  auto enabled = ddo_bench::offloader_for(m.table, setup, t, ddo::placement::file);
  auto& off = *enabled.offloader;
  *description = t.file_io_description();
  auto s = t.make_stream();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t g = 0; g < off.group_count(); ++g) (void)off.acquire(g, T::view(s));
  t.synchronize(T::view(s));
  const double sec = seconds_since(t0);
  const std::uint64_t hwm = proc_kib_field("/proc/self/status", "VmHWM:");
  mem->rss_growth = hwm > rss0 ? hwm - rss0 : 0;
  mem->cache_growth = static_cast<std::int64_t>(proc_kib_field("/proc/meminfo", "Cached:")) -
                      static_cast<std::int64_t>(cache0);
  mem->shmem_growth = static_cast<std::int64_t>(proc_kib_field("/proc/meminfo", "Shmem:")) -
                      static_cast<std::int64_t>(shmem0);
  mem->file_cache_growth =
      static_cast<std::int64_t>(file_cached_bytes(m.path)) - static_cast<std::int64_t>(file0);
  mem->staging = 2 * no.staging_slot_bytes;
  if constexpr (std::is_same_v<Inner, ddo::host_sim_transport>)
    mem->sim_device = t.ledger().peak(ddo::ledger_kind::device);
  // The cyclic prefetch started loading the next step's first groups: those bytes are not
  // counted, but their reads may have overlapped the end of the step (a slight underestimate).
  return static_cast<double>(m.bytes) / sec;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    const auto cuda = ddo::query_cuda_availability();
    const bool gpu = cuda.available && !o.host_sim;
    const std::string path =
        (std::filesystem::path(o.dir) / ("ddo_file_route_bench_" + std::to_string(::getpid()) + ".bin")).string();
    const std::uint64_t group_bytes = first_group_bytes(o);
    const std::uint64_t file_bytes =
        std::max(static_cast<std::uint64_t>(o.gib * static_cast<double>(ddo::gib)), group_bytes);
    print_header(o, gpu ? "GPU 0 (linear transport)"
                        : "host_sim (" + (o.host_sim ? std::string("--host-sim") : cuda.reason) + ")",
                 path, file_bytes);
    const auto tw = std::chrono::steady_clock::now();
    write_file(path, file_bytes);
    std::printf("wrote the file in %.1f s\n", seconds_since(tw));
    struct remover {
      std::string p;
      bool keep;
      ~remover() {
        if (!keep) std::filesystem::remove(p);
      }
    } cleanup{path, o.keep_file};

    const file_model m = make_model(o, path, file_bytes);
    std::vector<double> raw_direct, raw_buffered, via_ddo;
    std::vector<memory_pass> memory;
    std::string drop, direct_mode, buffered_mode, ddo_mode;
    for (int p = 0; p < o.passes; ++p) {
      drop = drop_cache(path, o.global_drop);
      raw_direct.push_back(raw_pass(o, path, true, group_bytes, file_bytes, &direct_mode));
      drop = drop_cache(path, o.global_drop);
      raw_buffered.push_back(raw_pass(o, path, false, group_bytes, file_bytes, &buffered_mode));
      drop = drop_cache(path, o.global_drop);
      memory.emplace_back();
      via_ddo.push_back(gpu ? ddo_pass(o, m, ddo::linear_transport{}, &ddo_mode, &memory.back())
                            : ddo_pass(o, m, ddo::host_sim_transport{}, &ddo_mode, &memory.back()));
      std::fprintf(stderr, "pass %d: raw %s %.2f GB/s, raw buffered %.2f GB/s, ddo %.2f GB/s\n", p + 1,
                   direct_mode.c_str(), raw_direct.back() / 1e9, raw_buffered.back() / 1e9, via_ddo.back() / 1e9);
    }
    const double rd = median(raw_direct), rb = median(raw_buffered), dd = median(via_ddo);
    const double raw = std::max(rd, rb);
    const double ratio = dd / raw;
    std::printf("\n| what | GB/s (median of %d cold passes) |\n|---|---|\n", o.passes);
    std::printf("| raw %s reads of the file | %.3f |\n", direct_mode.c_str(), rd / 1e9);
    std::printf("| raw buffered reads of the file | %.3f |\n", rb / 1e9);
    std::printf("| ddo file route delivered to the %s (%s) | %.3f |\n", gpu ? "GPU" : "host_sim device",
                ddo_mode.c_str(), dd / 1e9);
    std::printf("\nfile route: %.3f x the better raw read (target >= 0.90: %s); cache dropped with %s\n",
                ratio, ratio >= 0.90 ? "met" : "NOT met", drop.c_str());
    // Host memory: the largest RSS growth of the passes against staging + 5% (+ host_sim's
    // simulated device memory, which is host memory there).
    std::uint64_t rss = 0, allowed = 0;
    std::int64_t cache = 0, shmem = 0, file_cache = 0;
    for (const auto& p : memory) {
      rss = std::max(rss, p.rss_growth);
      cache = std::max(cache, p.cache_growth);
      shmem = std::max(shmem, p.shmem_growth);
      file_cache = std::max(file_cache, p.file_cache_growth);
      allowed = std::max<std::uint64_t>(allowed, p.staging + p.staging / 20 + p.sim_device);
    }
    const bool rss_ok = rss <= allowed;
    std::printf("host memory: peak RSS growth %.3f GB during a pass (allowed: staging %.3f GB + 5%%%s = %.3f GB: %s%s); "
                "page cache growth %.3f GB (%.1f%% of the %.2f GB read)\n",
                static_cast<double>(rss) / 1e9, static_cast<double>(memory.front().staging) / 1e9,
                gpu ? "" : " + host_sim device memory", static_cast<double>(allowed) / 1e9,
                rss_ok ? "met" : "NOT met", memory.front().peak_reset ? "" : "; VmHWM not resettable here, peak since start",
                static_cast<double>(cache) / 1e9, 100.0 * static_cast<double>(cache) / static_cast<double>(m.bytes),
                static_cast<double>(m.bytes) / 1e9);
    // The target (page-cache growth <= 5% of the weights with O_DIRECT) is about the file's
    // pages; "Cached:" also counts Shmem, where pinned memory shows.
    const double file_share = static_cast<double>(file_cache) / static_cast<double>(m.bytes);
    std::printf("page cache: the model file's own resident pages grew %.3f GB during a pass (%.1f%% of the read; "
                "target <= 5%% with O_DIRECT: %s); of the \"Cached:\" growth, Shmem (pinned memory among it) %.3f GB\n",
                static_cast<double>(file_cache) / 1e9, 100.0 * file_share, file_share <= 0.05 ? "met" : "NOT met",
                static_cast<double>(shmem) / 1e9);
    if (!o.json.empty()) {
      ddo::json_writer j;
      j.begin_object().member("bench", "file_route").member("device", gpu ? "gpu" : "host_sim");
      j.member("file_bytes", file_bytes).member("threads", o.threads);
      j.member("request_bytes", o.request_mib * ddo::mib).member("group_bytes", group_bytes);
      j.member("cache_drop", drop).member("raw_direct_mode", direct_mode);
      j.member("raw_direct_bps", rd).member("raw_buffered_bps", rb).member("ddo_bps", dd);
      j.member("ratio", ratio).key("target").encoded("0.90").key("passes").begin_object();
      for (const auto& [name, passes] : {std::pair{"raw_direct", &raw_direct},
                                         std::pair{"raw_buffered", &raw_buffered},
                                         std::pair{"ddo", &via_ddo}}) {
        j.key(name).begin_array();
        for (double bps : *passes) j.value(bps);
        j.end_array();
      }
      j.end_object().key("summary").begin_array();
      j.begin_object().member("metric", "file route delivered / raw read, cold").member("value", ratio);
      j.member("target", ">= 0.90").member("pass", ratio >= 0.90).end_object();
      j.begin_object().member("metric", "raw read (better of O_DIRECT and buffered)");
      j.member("value", raw / 1e9).member("unit", "GB/s").end_object();
      j.begin_object().member("metric", "ddo file route delivered").member("value", dd / 1e9);
      j.member("unit", "GB/s").end_object();
      j.begin_object().member("metric", "file route peak RSS growth / allowed (staging + 5%)");
      j.member("value", static_cast<double>(rss) / static_cast<double>(allowed));
      j.member("target", "<= 1.0").member("pass", rss_ok).end_object();
      j.begin_object().member("metric", "page cache growth during a ddo pass / bytes read");
      j.member("value", static_cast<double>(cache) / static_cast<double>(m.bytes)).end_object();
      j.begin_object().member("metric", "model file pages cached during a ddo pass (mincore) / bytes read");
      j.member("value", static_cast<double>(file_cache) / static_cast<double>(m.bytes));
      j.member("target", "<= 0.05").member("pass", file_share <= 0.05).end_object();
      j.end_array().end_object();
      // Written aside and renamed: no partial file on a full disk.
      ddo::write_file_atomically(o.json, j.take() + "\n");
    }
    ddo::flush_standard_output();  // a full disk is a failure, not success
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "file_route_bench: %s\n", e.what());
    return 1;
  }
}
