#include "server/admission.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace arbiter::server {
namespace {

using json = nlohmann::json;

// The fixture's Pod CREATE of two whole GPUs, in namespace research, for
// allocation 42 member 0; named `name`, or by generateName when empty.
json Review(const std::string& name) {
  std::ifstream in(std::string(ARBITER_ADMISSION_FIXTURES) + "/pod-create-nvidia-gpu.request.json");
  std::stringstream text;
  text << in.rdbuf();
  json review = json::parse(text.str());
  json& request = review["request"];
  json& meta = request["object"]["metadata"];
  request["namespace"] = "research";
  meta["namespace"] = "research";
  meta["annotations"]["arbiter.dev/allocation"] = "42";
  request["name"] = name;
  if (name.empty()) {
    meta.erase("name");
    meta["generateName"] = "train-";
  } else {
    meta["name"] = name;
  }
  return review;
}

// Allocation 42: team research, admitted, member 0 on node 7 (gpu-7), GPUs 0 and 1.
struct Fake {
  core::CapacityRequest request;
  std::vector<std::string> claims;  // "id/member/holder" of each claim call.
  absl::Status claim_status = absl::OkStatus();

  Fake() {
    request.id = 42;
    request.spec.team = "research";
    request.spec.members = 1;
    request.state = core::RequestState::kAdmitted;
    core::Placement p;
    p.member = 0;
    p.node_id = 7;
    p.gpu_indices = {0, 1};
    p.exclusive = true;
    request.placements.push_back(p);
  }

  AdmissionLookups Lookups() {
    AdmissionLookups l;
    l.request = [this](int64_t id) -> absl::StatusOr<core::CapacityRequest> {
      if (id != 42) return absl::NotFoundError("no such request");
      return request;
    };
    l.node_name = [](int64_t node_id) { return node_id == 7 ? std::string("gpu-7") : ""; };
    l.claim = [this](int64_t id, int32_t member,
                     const std::string& holder) -> absl::StatusOr<core::CapacityRequest> {
      claims.push_back(absl::StrCat(id, "/", member, "/", holder));
      if (!claim_status.ok()) return claim_status;
      return request;
    };
    return l;
  }
};

json Answer(const absl::StatusOr<std::string>& body) {
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? json::parse(*body)["response"] : json();
}

TEST(AdmissionTest, ValidatingAdmissionClaimsTheMemberForThePod) {
  Fake fake;
  const json answer = Answer(ReviewClaim(Review("train-0").dump(), fake.Lookups()));
  EXPECT_TRUE(answer["allowed"].get<bool>()) << answer;
  EXPECT_EQ(fake.claims, std::vector<std::string>{"42/0/pod:research/train-0"});
}

TEST(AdmissionTest, ASecondPodIsDeniedNamingTheFirst) {
  Fake fake;
  fake.claim_status = absl::FailedPreconditionError(
      "allocation 42 member 0 is already claimed by pod:research/train-0");
  const json answer = Answer(ReviewClaim(Review("train-1").dump(), fake.Lookups()));
  EXPECT_FALSE(answer["allowed"].get<bool>());
  EXPECT_EQ(answer["status"]["code"], 403);
  EXPECT_NE(answer["status"]["message"].get<std::string>().find("pod:research/train-0"),
            std::string::npos)
      << answer;
  // The mutating webhook denies it too, once the claim is on the request.
  fake.request.claims.push_back(core::Claim{0, "pod:research/train-0"});
  const json mutated = Answer(ReviewAdmission(Review("").dump(), fake.Lookups()));
  EXPECT_FALSE(mutated["allowed"].get<bool>());
  EXPECT_NE(mutated["status"]["message"].get<std::string>().find(
                "already claimed by pod:research/train-0"),
            std::string::npos)
      << mutated;
}

TEST(AdmissionTest, TheHolderItselfIsAdmittedAgain) {
  Fake fake;
  fake.request.claims.push_back(core::Claim{0, "pod:research/train-0"});
  EXPECT_TRUE(Answer(ReviewAdmission(Review("train-0").dump(), fake.Lookups()))["allowed"]);
  EXPECT_TRUE(Answer(ReviewClaim(Review("train-0").dump(), fake.Lookups()))["allowed"]);
}

TEST(AdmissionTest, AReplicaThatDoesNotLeadAdmitsUnclaimedWithAWarning) {
  Fake fake;
  fake.claim_status = absl::AbortedError("this replica is not the leader; retry at leader=a:1");
  const json answer = Answer(ReviewClaim(Review("train-0").dump(), fake.Lookups()));
  EXPECT_TRUE(answer["allowed"].get<bool>());
  ASSERT_EQ(answer["warnings"].size(), 1u) << answer;
  EXPECT_NE(answer["warnings"][0].get<std::string>().find("arbiter-kube claims it"),
            std::string::npos);
}

TEST(AdmissionTest, ADryRunClaimsNothing) {
  Fake fake;
  json review = Review("train-0");
  review["request"]["dryRun"] = true;
  EXPECT_TRUE(Answer(ReviewClaim(review.dump(), fake.Lookups()))["allowed"]);
  EXPECT_TRUE(fake.claims.empty());
}

TEST(AdmissionTest, ArbiterUnavailableDeniesWith503) {
  Fake fake;
  fake.claim_status = absl::UnavailableError("decision not acknowledged");
  const json answer = Answer(ReviewClaim(Review("train-0").dump(), fake.Lookups()));
  EXPECT_FALSE(answer["allowed"].get<bool>());
  EXPECT_EQ(answer["status"]["code"], 503);
}

TEST(AdmissionTest, AnUnnamedPodCannotBeClaimed) {
  Fake fake;
  absl::StatusOr<std::string> answer = ReviewClaim(Review("").dump(), fake.Lookups());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(answer.status().message().find("metadata.name"), std::string::npos);
  EXPECT_TRUE(fake.claims.empty());
}

}  // namespace
}  // namespace arbiter::server
