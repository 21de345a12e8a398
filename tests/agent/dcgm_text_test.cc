#include "clients/agent/dcgm_text.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace arbiter::agent {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(ARBITER_DCGM_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const DeviceReading* Find(const Scrape& s, int32_t gpu, int32_t instance) {
  for (const DeviceReading& d : s.devices) {
    if (d.gpu_index == gpu && d.mig_instance == instance) return &d;
  }
  return nullptr;
}

TEST(DcgmTextTest, NvidiaDocsSampleHasAWholeGpuAndAMigInstance) {
  Scrape s =
      ParseDcgmScrape(Fixture("mig-a100-whole-gpu-plus-1g.5gb.nvidia-cloud-native-docs.prom"));
  EXPECT_TRUE(s.problems.empty());
  EXPECT_EQ(s.sample_lines, 21);
  ASSERT_EQ(s.devices.size(), 2u);
  const DeviceReading* gpu = Find(s, 0, -1);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->uuid, "GPU-34319582-d595-d1c7-d1d2-179bcfa61660");
  EXPECT_EQ(gpu->hostname, "ub20-a100-k8s");
  EXPECT_EQ(gpu->engine_active_milli, 996);  // 0.995630
  EXPECT_EQ(gpu->fb_used_mib, 4845);
  EXPECT_EQ(gpu->fb_free_mib, 35690);
  EXPECT_EQ(gpu->power_mw, 409'692);
  EXPECT_EQ(gpu->util_milli, -1);
  const DeviceReading* mig = Find(s, 0, 13);
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(mig->mig_profile, "1g.5gb");
  EXPECT_EQ(mig->uuid, gpu->uuid);  // The parent's.
  EXPECT_EQ(mig->engine_active_milli, 996);
  EXPECT_EQ(mig->power_mw, -1);
}

TEST(DcgmTextTest, SeveralMigInstancesPerGpu) {
  Scrape s = ParseDcgmScrape(Fixture("mig-2x-a30-4x1g.6gb.dcgm-exporter-issue317.prom"));
  EXPECT_TRUE(s.problems.empty());
  ASSERT_EQ(s.devices.size(), 6u);
  for (const DeviceReading& d : s.devices) {
    EXPECT_EQ(d.mig_profile, "1g.6gb");
    EXPECT_EQ(d.model_name, "NVIDIA A30");
    EXPECT_EQ(d.fb_used_mib, 3);
    EXPECT_EQ(d.fb_free_mib, 6012);
  }
  EXPECT_EQ(Find(s, 1, 3)->engine_active_milli, 0);
  EXPECT_EQ(Find(s, 1, 4)->engine_active_milli, -1);  // Cut from the excerpt.
}

TEST(DcgmTextTest, PodLabelsOnSomeInstancesAndRenamedProfiles) {
  Scrape h100 =
      ParseDcgmScrape(Fixture("mig-h100-1g.10gb-pods.dcgm-exporter-issue512-comment.prom"));
  ASSERT_EQ(h100.devices.size(), 3u);
  EXPECT_FALSE(Find(h100, 0, 7)->pod.empty());
  EXPECT_TRUE(Find(h100, 0, 8)->pod.empty());
  EXPECT_FALSE(Find(h100, 0, 9)->pod_namespace.empty());

  Scrape a100 = ParseDcgmScrape(Fixture("mig-a100-80gb-7g.dcgm-exporter-issue713.prom"));
  ASSERT_EQ(a100.devices.size(), 1u);
  EXPECT_EQ(a100.devices[0].mig_instance, 0);
  EXPECT_EQ(a100.devices[0].mig_profile, "7g.79gb");
  EXPECT_EQ(a100.devices[0].pod, "");

  Scrape mixed = ParseDcgmScrape(Fixture("mixed-a30mig-rtx2000ada-pods.dcgm-exporter-pr736.prom"));
  ASSERT_EQ(mixed.devices.size(), 2u);
  EXPECT_EQ(Find(mixed, 1, -1)->hostname, "dcgm-exporter-wwwjh");  // Lower-case label.
  EXPECT_EQ(Find(mixed, 1, -1)->fb_free_mib, 11275);
  EXPECT_EQ(Find(mixed, 2, 3)->pod, "triton-server-f7cb5d77-95xcf");
}

TEST(DcgmTextTest, EveryPublishedFixtureParsesWithoutProblems) {
  const std::pair<const char*, size_t> fixtures[] = {
      {"mixed-mig-nonmig-h100-pods.dcgm-exporter-issue512.prom", 5},
      {"nonmig-4x-v100.dcgm-exporter-issue250.prom", 4},
      {"nonmig-8x-titanv.dcgm-exporter-issue58.prom", 5},
      {"pods-3x-l40s.dcgm-issue226.prom", 3},
      {"pods-dcgmproftester.gpu-monitoring-tools-issue138.prom", 1},
  };
  for (const auto& [name, devices] : fixtures) {
    Scrape s = ParseDcgmScrape(Fixture(name));
    EXPECT_TRUE(s.problems.empty()) << name << ": " << s.problems.front().message;
    EXPECT_EQ(s.devices.size(), devices) << name;
  }
  Scrape v100 = ParseDcgmScrape(Fixture("nonmig-4x-v100.dcgm-exporter-issue250.prom"));
  EXPECT_EQ(Find(v100, 0, -1)->util_milli, 0);
  Scrape l40s = ParseDcgmScrape(Fixture("pods-3x-l40s.dcgm-issue226.prom"));
  EXPECT_FALSE(Find(l40s, 0, -1)->pod.empty());
  EXPECT_TRUE(Find(l40s, 2, -1)->pod.empty());
}

TEST(DcgmTextTest, BadLinesAndValuesAreReportedAndSkipped) {
  const std::string text =
      "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 87\n"
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\"} 187\n"
      "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\"} 9223372036854775794\n"
      "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",} 71.25 1700000000000\n"
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" UUID=\"GPU-a\"} 1\n"
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"x\"} 1\n"
      "DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\",pod=\"a \\\"b\\\"\"} NaN\n"
      "go_goroutines 12\n";
  Scrape s = ParseDcgmScrape(text);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].util_milli, 870);
  EXPECT_EQ(s.devices[0].power_mw, 71'250);
  EXPECT_EQ(s.devices[0].fb_used_mib, -1);
  EXPECT_EQ(s.devices[0].pod, "a \"b\"");
  EXPECT_EQ(s.devices[1].util_milli, -1);
  ASSERT_EQ(s.problems.size(), 5u);
  EXPECT_EQ(s.problems[0].line, 3);  // 187%.
  EXPECT_EQ(s.problems[1].line, 4);  // The DCGM blank.
  EXPECT_EQ(s.problems[2].line, 6);  // No comma between labels.
  EXPECT_EQ(s.problems[3].line, 7);  // gpu="x".
  EXPECT_EQ(s.problems[4].line, 8);  // NaN.
}

}  // namespace
}  // namespace arbiter::agent
