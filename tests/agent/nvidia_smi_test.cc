// arbiter-agent's reading of `nvidia-smi -q -x` (clients/agent/nvidia_smi.h)
// and the node registration it makes of it (registration.h), on recorded
// output of real machines (fixtures/nvidia-smi, SOURCES.md): an A100 in MIG
// mode with four instances, eight V100S, two L4, a T4, a V100 with retired
// pages pending, and an H200 whose MIG tables are checked against Arbiter's
// built-in one.
#include "clients/agent/nvidia_smi.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

#include "clients/agent/registration.h"
#include "core/mig.h"

namespace arbiter::agent {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(ARBITER_NVIDIA_SMI_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<GpuFacts> Gpus(const std::string& name) {
  absl::StatusOr<std::vector<GpuFacts>> gpus = ParseNvidiaSmi(Fixture(name));
  EXPECT_TRUE(gpus.ok()) << gpus.status();
  return gpus.value_or(std::vector<GpuFacts>());
}

// The shipped catalog's A100-80GB MIG table (SMs, MiB; profile IDs), as the
// agent reads it from ListGpuModels.
const CatalogMig kCatalog = {{{"A100-80GB",
                               {{"1g.10gb", {14, 9728}},
                                {"1g.10gb+me", {14, 9728}},
                                {"1g.20gb", {14, 20224}},
                                {"2g.20gb", {28, 19968}},
                                {"3g.40gb", {42, 40448}},
                                {"4g.40gb", {56, 40448}},
                                {"7g.80gb", {98, 81152}}}}},
                             {{"A100-80GB",
                               {{19, "1g.10gb"},
                                {20, "1g.10gb+me"},
                                {15, "1g.20gb"},
                                {14, "2g.20gb"},
                                {9, "3g.40gb"},
                                {5, "4g.40gb"},
                                {0, "7g.80gb"}}}}};

const NodeIdentity kWho{"east", "gpu-1", "batch", "rack-1", 64'000, 512'000};

TEST(NvidiaSmiTest, AnA100InMigModeWithFourInstances) {
  const std::vector<GpuFacts> gpus = Gpus("telegraf-a100-sxm4-v12.xml");
  ASSERT_EQ(gpus.size(), 1u);
  const GpuFacts& g = gpus[0];
  EXPECT_EQ(g.product, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(g.uuid, "GPU-513536b6-7d19-9063-b049-1e69664bb298");
  EXPECT_EQ(g.memory_mib, 81920);
  EXPECT_TRUE(g.mig_enabled);
  EXPECT_TRUE(g.ecc_enabled);
  EXPECT_TRUE(g.unhealthy.empty());
  ASSERT_EQ(g.mig_devices.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(g.mig_devices[i].gpu_instance_id, static_cast<int32_t>(3 + i));
    EXPECT_EQ(g.mig_devices[i].sm_count, 14);
    EXPECT_EQ(g.mig_devices[i].memory_mib, 19968);
  }
  absl::StatusOr<Registration> reg = RegistrationOf(kWho, gpus, kCatalog);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_EQ(reg->node.gpus_size(), 1);
  EXPECT_EQ(reg->node.gpus(0).model(), "A100-80GB");
  EXPECT_EQ(reg->node.gpus(0).uuid(), g.uuid);
  EXPECT_EQ(reg->node.pool(), "batch");
  ASSERT_EQ(reg->notes.size(), 1u);
  // 14 SMs and 19968 MiB: the 1g.20gb profile (20224 MiB in the table).
  EXPECT_NE(reg->notes[0].find("4 x 1g.20gb"), std::string::npos) << reg->notes[0];
  EXPECT_FALSE(reg->unhealthy);
}

TEST(NvidiaSmiTest, MultiGpuNodesMapToTheirCatalogModels) {
  struct Case {
    const char* fixture;
    size_t gpus;
    const char* model;
  };
  for (const Case& c : std::vector<Case>{{"datakit-8x-v100s-pcie-460.xml", 8, "V100M32"},
                                         {"datarhei-2x-l4-555.xml", 2, "L4"},
                                         {"telegraf-tesla-t4.xml", 1, "T4"}}) {
    SCOPED_TRACE(c.fixture);
    const std::vector<GpuFacts> gpus = Gpus(c.fixture);
    ASSERT_EQ(gpus.size(), c.gpus);
    absl::StatusOr<Registration> reg = RegistrationOf(kWho, gpus, kCatalog);
    ASSERT_TRUE(reg.ok()) << reg.status();
    std::vector<std::string> uuids;
    for (int i = 0; i < reg->node.gpus_size(); ++i) {
      EXPECT_EQ(reg->node.gpus(i).index(), i);
      EXPECT_EQ(reg->node.gpus(i).model(), c.model);
      EXPECT_EQ(reg->node.gpus(i).uuid().rfind("GPU-", 0), 0u);
      uuids.push_back(reg->node.gpus(i).uuid());
    }
    std::sort(uuids.begin(), uuids.end());
    EXPECT_EQ(std::unique(uuids.begin(), uuids.end()), uuids.end());
    EXPECT_FALSE(gpus[0].mig_enabled);
    EXPECT_TRUE(reg->notes.empty());
  }
}

TEST(NvidiaSmiTest, RetiredPagesPendingMakeTheNodeUnhealthy) {
  const std::vector<GpuFacts> gpus = Gpus("pai-v100-sxm3-retired-pages.xml");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].retired_pages, 2);
  ASSERT_EQ(gpus[0].unhealthy.size(), 1u);
  absl::StatusOr<Registration> reg = RegistrationOf(kWho, gpus, kCatalog);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->node.gpus(0).model(), "V100M32");
  EXPECT_TRUE(reg->unhealthy);
}

TEST(NvidiaSmiTest, BadDocumentsAndUnknownProductsAreRefused) {
  EXPECT_FALSE(ParseNvidiaSmi("<nvidia_smi_log><gpu>").ok());
  EXPECT_FALSE(ParseNvidiaSmi("<other/>").ok());
  EXPECT_FALSE(ParseNvidiaSmi("<nvidia_smi_log></nvidia_smi_log>").ok());
  EXPECT_FALSE(ParseNvidiaSmi("<nvidia_smi_log><gpu><product_name>X</product_name></gpu>"
                              "</nvidia_smi_log>")
                   .ok());
  const std::string card =
      "<?xml version=\"1.0\" ?><!DOCTYPE nvidia_smi_log SYSTEM \"x.dtd\"><nvidia_smi_log>"
      "<gpu id=\"00000000:01:00.0\"><product_name>NVIDIA GeForce RTX 3080 &amp; co"
      "</product_name><uuid>GPU-1</uuid><fb_memory_usage><total>10240 MiB</total>"
      "</fb_memory_usage></gpu></nvidia_smi_log>";
  absl::StatusOr<std::vector<GpuFacts>> gpus = ParseNvidiaSmi(card);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ((*gpus)[0].product, "NVIDIA GeForce RTX 3080 & co");
  EXPECT_EQ((*gpus)[0].pci_bus, "00000000:01:00.0");
  absl::StatusOr<Registration> reg = RegistrationOf(kWho, *gpus, kCatalog);
  EXPECT_EQ(reg.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(reg.status().message().find("RTX 3080"), std::string::npos);
}

TEST(NvidiaSmiTest, ProductsMapByNameAndMemory) {
  EXPECT_EQ(*CatalogModelOf("NVIDIA A100-SXM4-40GB", 40960), "A100-40GB");
  EXPECT_EQ(*CatalogModelOf("NVIDIA A100 80GB PCIe", 81920), "A100-80GB");
  EXPECT_EQ(*CatalogModelOf("NVIDIA H100 80GB HBM3", 81559), "H100-80GB");
  EXPECT_EQ(*CatalogModelOf("NVIDIA L40S", 46068), "L40S");
  EXPECT_EQ(*CatalogModelOf("NVIDIA A10G", 23028), "A10");
  EXPECT_EQ(*CatalogModelOf("Tesla V100-SXM2-16GB", 16160), "V100M16");
  EXPECT_EQ(*CatalogModelOf("NVIDIA B200", 183359), "B200");
  EXPECT_FALSE(CatalogModelOf("NVIDIA A40", 46068).ok());
}

TEST(MigPlacementsTest, ReadsNvidiaSmiMigLgipp) {
  absl::StatusOr<std::vector<MigPlacementFacts>> placements =
      ParseMigPlacements(Fixture("nvidia-smi-mig-lgipp.a100-40gb.mig-user-guide.txt"));
  ASSERT_TRUE(placements.ok()) << placements.status();
  ASSERT_EQ(placements->size(), 7u);
  EXPECT_EQ((*placements)[0], (MigPlacementFacts{0, 19, {0, 1, 2, 3, 4, 5, 6}, 1}));
  EXPECT_EQ((*placements)[4], (MigPlacementFacts{0, 9, {0, 4}, 4}));
  EXPECT_EQ((*placements)[5], (MigPlacementFacts{0, 5, {0}, 4})) << "\"Placement :\", one start";
  EXPECT_EQ((*placements)[6], (MigPlacementFacts{0, 0, {0}, 8}));
}

TEST(MigPlacementsTest, ALineOfAnotherShapeIsNamed) {
  absl::StatusOr<std::vector<MigPlacementFacts>> placements = ParseMigPlacements(
      "GPU  0 Profile ID 19 Placements: {0,1}:1\nNo MIG-enabled devices found.\n");
  EXPECT_EQ(placements.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(placements.status().message(), "line 2")) << placements.status();
  EXPECT_FALSE(ParseMigPlacements("GPU 0 Profile ID 9 Placements: {0,9}:4").ok()) << "slot 9";
}

TEST(MigPlacementsTest, AMigGpuReportsWhereItCanCreateEachCatalogProfile) {
  const std::vector<GpuFacts> gpus = Gpus("telegraf-a100-sxm4-v12.xml");
  absl::StatusOr<std::vector<MigPlacementFacts>> placements =
      ParseMigPlacements(Fixture("nvidia-smi-mig-lgipp.a100-40gb.mig-user-guide.txt"));
  ASSERT_TRUE(placements.ok());
  CatalogMig catalog = kCatalog;
  catalog.ids["A100-80GB"].erase(20);  // A catalog without the +me profile.
  absl::StatusOr<Registration> reg = RegistrationOf(kWho, gpus, catalog, *placements);
  ASSERT_TRUE(reg.ok()) << reg.status();
  const v1::Gpu& gpu = reg->node.gpus(0);
  std::map<std::string, std::vector<int32_t>> reported;
  for (const v1::MigPlacementReport& r : gpu.reported_mig_placements()) {
    reported[r.profile()] = {r.start_slots().begin(), r.start_slots().end()};
  }
  EXPECT_EQ(reported,
            (std::map<std::string, std::vector<int32_t>>{{"1g.10gb", {0, 1, 2, 3, 4, 5, 6}},
                                                         {"1g.20gb", {0, 2, 4, 6}},
                                                         {"2g.20gb", {0, 2, 4}},
                                                         {"3g.40gb", {0, 4}},
                                                         {"4g.40gb", {0}},
                                                         {"7g.80gb", {0}}}));
  EXPECT_TRUE(std::any_of(reg->notes.begin(), reg->notes.end(), [](const std::string& n) {
    return absl::StrContains(n, "MIG profile IDs 20 are not in the catalog's A100-80GB table");
  }));
}

TEST(NvidiaSmiTest, ARealH200OnDriver580) {
  const std::vector<GpuFacts> gpus = Gpus("nvidia-h200-580.xml");
  ASSERT_EQ(gpus.size(), 1u);
  const GpuFacts& g = gpus[0];
  EXPECT_EQ(g.product, "NVIDIA H200");
  EXPECT_EQ(g.uuid, "GPU-75e959cd-1b8f-066a-0676-fae5afe54822");
  EXPECT_EQ(g.memory_mib, 143771);
  EXPECT_FALSE(g.mig_enabled);
  EXPECT_TRUE(g.ecc_enabled);
  EXPECT_EQ(g.retired_pages, 0) << "Hopper remaps rows: retired_count is N/A";
  EXPECT_TRUE(g.unhealthy.empty()) << g.unhealthy.front();
  EXPECT_EQ(*CatalogModelOf(g.product, g.memory_mib), "H200-141GB");
  absl::StatusOr<Registration> reg = RegistrationOf(kWho, gpus, CatalogMig());
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->node.gpus(0).model(), "H200-141GB");
  EXPECT_FALSE(reg->unhealthy);
}

// One profile of `nvidia-smi mig -lgip`'s table: its first line of each
// pair, "|   0  MIG 1g.18gb   19   7/7   16.00   No   16   1   0   |".
struct ListedProfile {
  std::string name;
  int32_t id = 0;
  int32_t total = 0;
  double memory_gib = 0;
  int32_t sms = 0;
};

std::vector<ListedProfile> ListedProfiles(const std::string& text) {
  std::vector<ListedProfile> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string bar, gpu, mig, counts, p2p;
    ListedProfile p;
    if (!(words >> bar >> gpu >> mig) || mig != "MIG") continue;
    words >> p.name >> p.id >> counts >> p.memory_gib >> p2p >> p.sms;
    p.total = std::stoi(counts.substr(counts.find('/') + 1));
    out.push_back(p);
  }
  return out;
}

TEST(MigPlacementsTest, ARealH200ListsArbitersBuiltInH200Table) {
  const std::vector<core::MigProfile>* builtin = core::BuiltinMigProfiles("H200-141GB");
  ASSERT_NE(builtin, nullptr);
  const std::vector<ListedProfile> listed =
      ListedProfiles(Fixture("nvidia-smi-mig-lgip.h200-580.txt"));
  ASSERT_EQ(listed.size(), builtin->size());
  for (const ListedProfile& p : listed) {
    SCOPED_TRACE(p.name);
    const core::MigProfile* b = core::FindMigProfile(*builtin, p.name);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->profile_id, p.id);
    EXPECT_EQ(b->max_instances, p.total);
    EXPECT_EQ(b->sm_count, p.sms);
    EXPECT_EQ(b->memory_mib, std::llround(p.memory_gib * 1024));
  }
  absl::StatusOr<std::vector<MigPlacementFacts>> placements =
      ParseMigPlacements(Fixture("nvidia-smi-mig-lgipp.h200-580.txt"));
  ASSERT_TRUE(placements.ok()) << placements.status();
  ASSERT_EQ(placements->size(), builtin->size());
  for (const MigPlacementFacts& p : *placements) {
    SCOPED_TRACE(p.profile_id);
    auto b = std::find_if(builtin->begin(), builtin->end(),
                          [&](const core::MigProfile& m) { return m.profile_id == p.profile_id; });
    ASSERT_NE(b, builtin->end());
    EXPECT_EQ(b->start_slots, p.starts);
    EXPECT_EQ(b->memory_slices, p.size);
  }
}

}  // namespace
}  // namespace arbiter::agent
