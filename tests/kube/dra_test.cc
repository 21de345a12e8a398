#include "clients/kube/dra.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

json Fixture(const std::string& name) {
  std::ifstream in(std::string(ARBITER_DRA_FIXTURES) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::vector<SliceDevice> Devices(const std::string& name) {
  absl::StatusOr<std::vector<SliceDevice>> devices = ReadSlice(Fixture(name));
  EXPECT_TRUE(devices.ok()) << devices.status();
  return devices.ok() ? *devices : std::vector<SliceDevice>{};
}

MemberPlacement Whole(std::vector<int> indices, std::vector<std::string> uuids) {
  MemberPlacement m;
  m.allocation = 42;
  m.ns = "research";
  m.node = "gpu-0";
  m.gpu_indices = std::move(indices);
  m.gpu_uuids = std::move(uuids);
  return m;
}

TEST(DraTest, ReadsTheDriversSliceOfWholeGpus) {
  std::vector<SliceDevice> devices = Devices("resourceslice-gpus.json");
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_EQ(devices[1].name, "gpu-1");
  EXPECT_EQ(devices[1].type, "gpu");
  EXPECT_EQ(devices[1].pool, "gpu-0");
  EXPECT_EQ(devices[1].node, "gpu-0");
  EXPECT_EQ(devices[1].uuid, "GPU-a84e2d17-0b93-4c6f-8e5a-12d3c4b5f602");
  EXPECT_EQ(devices[1].index, -1) << "the current driver publishes no index";
}

TEST(DraTest, AWholeGpuClaimNamesTheDeviceWithArbitersUuid) {
  const std::vector<SliceDevice> devices = Devices("resourceslice-gpus.json");
  const MemberPlacement m = Whole({1}, {"GPU-a84e2d17-0b93-4c6f-8e5a-12d3c4b5f602"});
  absl::StatusOr<std::vector<SliceDevice>> chosen = MatchDevices(m, devices);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  ASSERT_EQ(chosen->size(), 1u);
  EXPECT_EQ((*chosen)[0].name, "gpu-1");
  // The status the scheduler honours: exactly the fixture's allocation.
  const json expected = Fixture("resourceclaim-allocated.json");
  EXPECT_EQ(ClaimStatus(m, *chosen)["allocation"], expected["status"]["allocation"]);
  const json claim = ClaimSpec(m, *chosen);
  EXPECT_EQ(claim["metadata"]["name"], "arbiter-42-0");
  EXPECT_EQ(claim["metadata"]["namespace"], "research");
  const json& request = claim["spec"]["devices"]["requests"][0];
  EXPECT_EQ(request["name"], expected["spec"]["devices"]["requests"][0]["name"]);
  EXPECT_EQ(request["exactly"]["deviceClassName"], "gpu.nvidia.com");
  EXPECT_EQ(request["exactly"]["count"], 1);
  EXPECT_EQ(request["exactly"]["selectors"][0]["cel"]["expression"],
            "device.attributes[\"gpu.nvidia.com\"].uuid == "
            "\"GPU-a84e2d17-0b93-4c6f-8e5a-12d3c4b5f602\"");
}

TEST(DraTest, SeveralGpusOneRequestEachInPlacementOrder) {
  const std::vector<SliceDevice> devices = Devices("resourceslice-gpus.json");
  MemberPlacement m = Whole({3, 0}, {"GPU-d5c7e9a1-3f28-4e60-a4b7-0c1d2e3f4a04",
                                     "GPU-3f1c9a52-7d4e-4b8a-9c21-5e6f70a18b01"});
  absl::StatusOr<std::vector<SliceDevice>> chosen = MatchDevices(m, devices);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  const json results = ClaimStatus(m, *chosen)["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["request"], "gpu-0");
  EXPECT_EQ(results[0]["device"], "gpu-3");
  EXPECT_EQ(results[1]["request"], "gpu-1");
  EXPECT_EQ(results[1]["device"], "gpu-0");
}

TEST(DraTest, WithoutAUuidTheOlderDriversIndexOrTheNameStandsIn) {
  MemberPlacement m = Whole({2}, {""});
  absl::StatusOr<std::vector<SliceDevice>> legacy =
      MatchDevices(m, Devices("resourceslice-gpus-legacy-v25.3.json"));
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ((*legacy)[0].name, "gpu-2");
  absl::StatusOr<std::vector<SliceDevice>> named =
      MatchDevices(m, Devices("resourceslice-gpus.json"));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)[0].name, "gpu-2");
  // The selector pins the device by the uuid the driver publishes for it.
  EXPECT_EQ(
      ClaimSpec(
          m,
          *named)["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"],
      "device.attributes[\"gpu.nvidia.com\"].uuid == "
      "\"GPU-6b20f4c8-91ae-4d37-b0f2-7a8c9d0e1f03\"");
}

TEST(DraTest, AMigInstanceIsFoundByParentProfileAndStart) {
  const std::vector<SliceDevice> devices = Devices("resourceslice-mig.json");
  MemberPlacement m = Whole({0}, {"GPU-1e2d3c4b-5a69-4788-9a0b-c1d2e3f40a10"});
  m.node = "gpu-1";
  m.mig_profile = "1g.10gb";
  m.mig_start = 5;
  absl::StatusOr<std::vector<SliceDevice>> chosen = MatchDevices(m, devices);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ((*chosen)[0].name, "gpu-0-mig-1g10gb-19-5");
  const json claim = ClaimSpec(m, *chosen);
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "mig.nvidia.com");
  EXPECT_EQ(ClaimStatus(m, *chosen)["allocation"]["devices"]["results"][0]["pool"], "gpu-1");
  m.mig_profile = "3g.40gb";
  m.mig_start = 0;
  chosen = MatchDevices(m, devices);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ((*chosen)[0].name, "gpu-0-mig-3g40gb-9-0");
}

TEST(DraTest, WhatIsNotPublishedIsNamed) {
  const std::vector<SliceDevice> devices = Devices("resourceslice-mig.json");
  MemberPlacement m = Whole({0}, {"GPU-1e2d3c4b-5a69-4788-9a0b-c1d2e3f40a10"});
  m.node = "gpu-1";
  m.mig_profile = "1g.10gb";
  m.mig_start = 6;
  absl::StatusOr<std::vector<SliceDevice>> chosen = MatchDevices(m, devices);
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(chosen.status().message().find("no MIG device 1g.10gb at start 6"), std::string::npos)
      << chosen.status();
  m.node = "gpu-9";
  EXPECT_NE(MatchDevices(m, devices).status().message().find("no ResourceSlice"),
            std::string::npos);
  MemberPlacement share = Whole({0}, {""});
  share.shared = true;
  EXPECT_EQ(MatchDevices(share, devices).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DraTest, AnotherDriversSliceHasNoDevicesForArbiter) {
  json slice = Fixture("resourceslice-gpus.json");
  slice["spec"]["driver"] = "gpu.example.com";
  absl::StatusOr<std::vector<SliceDevice>> devices = ReadSlice(slice);
  ASSERT_TRUE(devices.ok());
  EXPECT_TRUE(devices->empty());
  slice["spec"]["driver"] = "gpu.nvidia.com";
  slice["spec"].erase("nodeName");
  EXPECT_EQ(ReadSlice(slice).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace arbiter::kube
