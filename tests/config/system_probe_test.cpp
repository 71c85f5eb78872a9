// SPDX-License-Identifier: Apache-2.0
#include "ddo/memory/system_probe.hpp"

#include <unistd.h>

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ddo/config/windows_standby.hpp"
#include "support.hpp"

namespace {

// A scratch directory with prepared /proc and cgroup files, removed at the end of the test.
struct fake_system {
  std::filesystem::path root;
  ddo::system_paths paths;

  fake_system() {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    root = std::filesystem::temp_directory_path() /
           ("ddo_probe_" + std::to_string(::getpid()) + "_" + std::to_string(rng()));
    std::filesystem::create_directories(root / "cgroup");
    paths.meminfo = (root / "meminfo").string();
    paths.self_cgroup = (root / "self_cgroup").string();
    paths.cgroup_root = (root / "cgroup").string();
    paths.proc_version = (root / "version").string();
    paths.osrelease = (root / "osrelease").string();
  }
  ~fake_system() { std::filesystem::remove_all(root); }
  fake_system(const fake_system&) = delete;
  fake_system& operator=(const fake_system&) = delete;

  void write(const std::string& path, const std::string& text) const {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
};

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("available RAM is MemAvailable when no cgroup limit applies") {
    fake_system sys;
    const std::uint64_t kb = 1000 + static_cast<std::uint64_t>(::getpid()) % 100000;
    sys.write(sys.paths.meminfo, "MemTotal:       99999999 kB\nMemFree: 5 kB\nMemAvailable:   " +
                                     std::to_string(kb) + " kB\n");
    CHECK(ddo::available_ram_bytes(sys.paths) == kb * 1024);
    sys.write(sys.paths.self_cgroup, "0::/user.slice\n");
    sys.write(sys.paths.cgroup_root + "/user.slice/memory.max", "max\n");
    CHECK(ddo::available_ram_bytes(sys.paths) == kb * 1024);
    CHECK_FALSE(ddo::cgroup_memory_headroom_bytes(sys.paths));
  }

  TEST_CASE("a cgroup v2 limit minus usage caps available RAM, tightest level wins") {
    fake_system sys;
    sys.write(sys.paths.meminfo, "MemAvailable:   67108864 kB\n");  // 64 GiB
    sys.write(sys.paths.self_cgroup, "0::/box/job\n");
    sys.write(sys.paths.cgroup_root + "/box/job/memory.max", std::to_string(8 * ddo::gib) + "\n");
    sys.write(sys.paths.cgroup_root + "/box/job/memory.current", std::to_string(3 * ddo::gib));
    CHECK(ddo::available_ram_bytes(sys.paths) == 5 * ddo::gib);
    sys.write(sys.paths.cgroup_root + "/box/memory.max", std::to_string(4 * ddo::gib));
    sys.write(sys.paths.cgroup_root + "/box/memory.current", std::to_string(1 * ddo::gib));
    CHECK(ddo::available_ram_bytes(sys.paths) == 3 * ddo::gib);
  }

  TEST_CASE("a cgroup v1 memory limit applies; the v1 'unlimited' value does not") {
    fake_system sys;
    sys.write(sys.paths.meminfo, "MemAvailable:   16777216 kB\n");  // 16 GiB
    sys.write(sys.paths.self_cgroup, "12:cpu,cpuacct:/x\n7:memory:/docker/abc\n");
    const std::string dir = sys.paths.cgroup_root + "/memory/docker/abc";
    sys.write(dir + "/memory.limit_in_bytes", "9223372036854771712\n");
    sys.write(dir + "/memory.usage_in_bytes", "1000\n");
    CHECK(ddo::available_ram_bytes(sys.paths) == 16 * ddo::gib);
    sys.write(dir + "/memory.limit_in_bytes", std::to_string(6 * ddo::gib));
    sys.write(dir + "/memory.usage_in_bytes", std::to_string(2 * ddo::gib));
    CHECK(ddo::available_ram_bytes(sys.paths) == 4 * ddo::gib);
  }

  TEST_CASE("available RAM is unknown when nothing can be read") {
    fake_system sys;
    CHECK_FALSE(ddo::available_ram_bytes(sys.paths));
  }

  TEST_CASE("WSL is detected from /proc/version or osrelease") {
    fake_system sys;
    sys.write(sys.paths.proc_version, "Linux version 6.1.0-13-amd64 (debian-kernel@lists.debian.org)\n");
    sys.write(sys.paths.osrelease, "6.1.0-13-amd64\n");
    CHECK_FALSE(ddo::running_on_wsl(sys.paths));
    sys.write(sys.paths.osrelease, "5.15.167.4-microsoft-standard-WSL2\n");
    CHECK(ddo::running_on_wsl(sys.paths));
    sys.write(sys.paths.osrelease, "6.1.0\n");
    sys.write(sys.paths.proc_version, "Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com)\n");
    CHECK(ddo::running_on_wsl(sys.paths));
  }

  TEST_CASE("resolution reads RAM and WSL through the injected paths") {
    fake_system sys;
    sys.write(sys.paths.meminfo, "MemAvailable:   10485760 kB\n");  // 10 GiB
    sys.write(sys.paths.osrelease, "5.15-microsoft-standard-WSL2\n");
    ddo::resolve_inputs inputs;
    inputs.environment = std::map<std::string, std::string>{};
    inputs.paths = sys.paths;
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.running_on_wsl);
    CHECK(settings.effective_preset == "wsl_compat");
    CHECK(settings.config.available_system_ram_gb == 10.0);
  }

  TEST_CASE("the Windows standby purge is a reported no-op on Linux and WSL") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_PURGE_WINDOWS_STANDBY_BEFORE_VAE", "1"}});
    const auto settings = ddo::resolve_settings(inputs);
    auto result = ddo::maybe_purge_windows_standby_cache("before_vae", settings);
    CHECK(result.phase == "before_vae");
    CHECK(result.enabled);
    CHECK_FALSE(result.purged);
    CHECK(result.reason.find("Windows-only") != std::string::npos);
    // An explicit false wins over the environment; absent inherits; other phases are off.
    CHECK_FALSE(ddo::maybe_purge_windows_standby_cache("before_vae", settings, false).enabled);
    CHECK(ddo::maybe_purge_windows_standby_cache("BEFORE_VAE", settings).enabled);
    result = ddo::maybe_purge_windows_standby_cache("after_text", settings);
    CHECK_FALSE(result.enabled);
    CHECK(result.reason == "disabled for this phase");
    CHECK(ddo::maybe_purge_windows_standby_cache("after_text", settings, true).enabled);
    inputs.running_on_wsl = true;
    result = ddo::maybe_purge_windows_standby_cache("before_vae", ddo::resolve_settings(inputs));
    CHECK_FALSE(result.purged);
    CHECK(result.reason.find("WSL") != std::string::npos);
  }
}
