// The NVML reader (clients/agent/nvml.h) against a library: by default the
// stand-in tests/agent/fake_nvml.cc, or the real one on a GPU machine:
//   ARBITER_NVML_LIBRARY=libnvidia-ml.so.1 build/tests/agent/nvml_test
// The contract cases hold for both; the exact values are the stand-in's.
#include "clients/agent/nvml.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include <gtest/gtest.h>

namespace arbiter::agent {
namespace {

std::string Library() {
  const char* chosen = std::getenv("ARBITER_NVML_LIBRARY");
  return chosen != nullptr ? chosen : ARBITER_FAKE_NVML;
}
bool UsingFake() { return Library() == ARBITER_FAKE_NVML; }

TEST(NvmlContractTest, EveryGpuReadsWithinItsRanges) {
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Open(Library());
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  std::vector<std::string> problems;
  const std::vector<DeviceReading> readings = (*nvml)->Read(&problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  ASSERT_FALSE(readings.empty());
  for (size_t i = 0; i < readings.size(); ++i) {
    const DeviceReading& r = readings[i];
    SCOPED_TRACE(r.uuid);
    EXPECT_EQ(r.gpu_index, static_cast<int32_t>(i));
    EXPECT_TRUE(absl::StartsWith(r.uuid, "GPU-"));
    EXPECT_FALSE(r.model_name.empty());
    EXPECT_GE(r.util_milli, 0);
    EXPECT_LE(r.util_milli, 1000);
    EXPECT_GE(r.fb_used_mib, 0);
    EXPECT_GT(r.fb_used_mib + r.fb_free_mib, 0);
    EXPECT_TRUE(r.power_mw == -1 || r.power_mw > 0) << r.power_mw;
  }
}

TEST(NvmlContractTest, AMissingLibraryIsUnavailableNamingIt) {
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Open("libnvidia-ml-not-here.so.1");
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(nvml.status().message(), "libnvidia-ml-not-here.so.1"));
}

TEST(NvmlFakeTest, ReadsTheStandInsValues) {
  if (!UsingFake()) GTEST_SKIP() << "values of the stand-in only";
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Open(Library());
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  std::vector<std::string> problems;
  const std::vector<DeviceReading> r = (*nvml)->Read(&problems);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].uuid, "GPU-3f1c9a52-7d4e-4b8a-9c21-5e6f70a18b01");
  EXPECT_EQ(r[0].model_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r[0].util_milli, 370);
  EXPECT_EQ(r[0].fb_used_mib, 12288) << "the driver's 615 MiB reservation is not the workload's";
  EXPECT_EQ(r[0].fb_free_mib, 81559 - 615 - 12288);
  EXPECT_EQ(r[1].fb_used_mib, 0) << "an idle GPU uses nothing";
  EXPECT_EQ(r[0].power_mw, 312000);
  EXPECT_EQ(r[1].power_mw, -1) << "not supported on this board: left unknown";
}

TEST(NvmlFakeTest, ADriverBeforeMemoryV2CountsItsReservationAsUsed) {
  if (!UsingFake()) GTEST_SKIP() << "the stand-in plays an old driver on request";
  setenv("FAKE_NVML_NO_MEMORY_V2", "1", 1);
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Open(Library());
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  std::vector<std::string> problems;
  const std::vector<DeviceReading> r = (*nvml)->Read(&problems);
  std::vector<std::string> again;
  (*nvml)->Read(&again);
  unsetenv("FAKE_NVML_NO_MEMORY_V2");
  ASSERT_EQ(problems.size(), 1u) << "said once, with what it means";
  EXPECT_TRUE(absl::StrContains(problems[0], "nvmlDeviceGetMemoryInfo_v2: "));
  EXPECT_TRUE(absl::StrContains(problems[0], "includes the driver's reservation"));
  EXPECT_TRUE(again.empty()) << again.front();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].fb_used_mib, 12288 + 615);
  EXPECT_EQ(r[1].fb_used_mib, 615);
}

TEST(NvmlFakeTest, ADriverNotLoadedIsUnavailableWithNvmlsWords) {
  if (!UsingFake()) GTEST_SKIP() << "the stand-in fails on request";
  setenv("FAKE_NVML_DRIVER_NOT_LOADED", "1", 1);
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Open(Library());
  unsetenv("FAKE_NVML_DRIVER_NOT_LOADED");
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(nvml.status().message(), "nvmlInit_v2: Driver Not Loaded"))
      << nvml.status();
}

}  // namespace
}  // namespace arbiter::agent
