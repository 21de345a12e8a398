// Node lifecycle (docs/nodes.md): a cordoned node takes nothing new; a drain
// gives every allocation on it notice; a failed node ends its allocations,
// gangs whole, charged to the failure; removal only when empty; heartbeats
// that stop make a node unreachable and bring it back; updates keep what a
// node in use cannot change.
#include <vector>

#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const NodeRef kN1{"c", "n1"};
const NodeRef kN2{"c", "n2"};

// Two nodes of 2 H100s in pool "serving"; team t may use 16 GPUs there.
State TwoNodes() {
  State s = ::arbiter::testing::MakeState(16'000);
  AddNode(s, MakeNode("n1", 2, "H100-80GB"));
  AddNode(s, MakeNode("n2", 2, "H100-80GB"));
  return s;
}

CapacityRequest Ask(State& s, const char* key, int members, int gpus, absl::Time at = kT0) {
  ChangeSet ch;
  absl::StatusOr<RequestOutcome> out = RequestCapacity(s, WholeSpec(key, members, gpus), at, ch);
  EXPECT_THAT(out, IsOk());
  return out->request;
}

int64_t NodeOf(const State& s, int64_t request_id) {
  return s.FindLiveRequest(request_id)->placements.at(0).node_id;
}

TEST(NodesTest, ACordonedNodeTakesNothingNewAndUncordoningAdmitsTheQueue) {
  State s = TwoNodes();
  ChangeSet ch;
  ASSERT_THAT(CordonNode(s, kN1, true, kT0, ch), IsOk());
  ASSERT_EQ(ch.changes.size(), 1u);
  EXPECT_EQ(std::get<NodeWrite>(ch.changes[0]).event, NodeEvent::kCordon);
  // Cordoning again records nothing.
  ChangeSet again;
  ASSERT_THAT(CordonNode(s, kN1, true, kT0, again), IsOk());
  EXPECT_TRUE(again.empty());
  const CapacityRequest a = Ask(s, "a", 1, 2);
  EXPECT_EQ(a.state, RequestState::kAdmitted);
  EXPECT_EQ(NodeOf(s, a.id), s.FindNode("c", "n2")->id);
  const CapacityRequest b = Ask(s, "b", 1, 2);
  EXPECT_EQ(b.state, RequestState::kQueued);  // n1 has room but is cordoned.
  ChangeSet un;
  ASSERT_THAT(CordonNode(s, kN1, false, kT0 + absl::Seconds(1), un), IsOk());
  EXPECT_EQ(s.FindLiveRequest(b.id)->state, RequestState::kAdmitted);
  EXPECT_EQ(NodeOf(s, b.id), s.FindNode("c", "n1")->id);
}

TEST(NodesTest, GangsWithATopologyAvoidUnschedulableNodesToo) {
  State s = TwoNodes();
  ChangeSet ch;
  ASSERT_THAT(CordonNode(s, kN1, true, kT0, ch), IsOk());
  ASSERT_THAT(FailNode(s, kN2, absl::InfinitePast(), kT0, ch), IsOk());
  CapacityRequestSpec spec = WholeSpec("same-node", 2, 1);
  spec.topology = Topology::kSameNode;
  absl::StatusOr<RequestOutcome> out = RequestCapacity(s, spec, kT0, ch);
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->request.state, RequestState::kQueued);
  ASSERT_THAT(CordonNode(s, kN1, false, kT0, ch), IsOk());
  EXPECT_EQ(NodeOf(s, out->request.id), s.FindNode("c", "n1")->id);
}

TEST(NodesTest, ADrainNoticesEveryAllocationOnTheNodeAndTheyVacate) {
  State s = TwoNodes();
  const CapacityRequest a = Ask(s, "a", 1, 1);
  const CapacityRequest b = Ask(s, "b", 1, 1);
  ASSERT_EQ(NodeOf(s, a.id), NodeOf(s, b.id));  // Best fit: both on one node.
  const NodeRef ref{"c", s.FindNode(NodeOf(s, a.id))->name};
  ChangeSet ch;
  absl::StatusOr<DrainOutcome> drained = DrainNode(s, ref, 120, kT0 + absl::Seconds(10), ch);
  ASSERT_THAT(drained, IsOk());
  EXPECT_EQ(drained->notified, (std::vector<int64_t>{a.id, b.id}));
  EXPECT_TRUE(drained->node.cordoned);
  EXPECT_EQ(drained->node.drain_deadline, kT0 + absl::Seconds(130));
  for (int64_t id : {a.id, b.id}) {
    const CapacityRequest& r = *s.FindLiveRequest(id);
    EXPECT_EQ(r.state, RequestState::kPreempting);
    EXPECT_EQ(r.reason_code, kReasonNodeDrain);
    EXPECT_EQ(r.preempt_deadline, kT0 + absl::Seconds(130));
  }
  // One leaves by itself; the other is ended at the deadline.
  ASSERT_THAT(ReleaseRequest(s, a.id, kT0 + absl::Seconds(20), ch), IsOk());
  ChangeSet due;
  Tick(s, kT0 + absl::Seconds(130), due);
  EXPECT_EQ(s.FindLiveRequest(b.id), nullptr);
  EXPECT_FALSE(s.FindNode(ref.cluster, ref.name)->busy());
  EXPECT_TRUE(s.FindNode(ref.cluster, ref.name)->cordoned);
}

TEST(NodesTest, AFailedNodeEndsItsAllocationsGangsWholeChargedToTheFailure) {
  State s = TwoNodes();
  const CapacityRequest gang = Ask(s, "gang", 2, 2);  // One member per node.
  ASSERT_EQ(gang.state, RequestState::kAdmitted);
  const CapacityRequest queued = Ask(s, "later", 1, 2, kT0 + absl::Seconds(1));
  ASSERT_EQ(queued.state, RequestState::kQueued);
  ChangeSet ch;
  absl::StatusOr<FailOutcome> failed =
      FailNode(s, kN1, kT0 + absl::Seconds(50), kT0 + absl::Seconds(60), ch);
  ASSERT_THAT(failed, IsOk());
  EXPECT_EQ(failed->ended, std::vector<int64_t>{gang.id});
  EXPECT_EQ(failed->node.health, NodeHealth::kFailed);
  const CapacityRequest& ended = std::get<RequestWrite>(ch.changes[0]).request;
  EXPECT_EQ(ended.state, RequestState::kReleased);
  EXPECT_EQ(ended.reason_code, kReasonNodeFailed);
  EXPECT_EQ(ended.updated_at, kT0 + absl::Seconds(50));
  // Its member on n2 was freed too, and the queue took n2 (not failed n1).
  EXPECT_EQ(s.FindLiveRequest(queued.id)->state, RequestState::kAdmitted);
  EXPECT_EQ(NodeOf(s, queued.id), s.FindNode("c", "n2")->id);
  EXPECT_FALSE(s.FindNode("c", "n1")->busy());
  // Uncordoning clears the failure.
  ASSERT_THAT(CordonNode(s, kN1, false, kT0 + absl::Seconds(70), ch), IsOk());
  EXPECT_EQ(s.FindNode("c", "n1")->health, NodeHealth::kHealthy);
  EXPECT_EQ(Ask(s, "again", 1, 2, kT0 + absl::Seconds(71)).state, RequestState::kAdmitted);
}

TEST(NodesTest, RemovalOnlyWhenEmptyAndTheNameMayReturn) {
  State s = TwoNodes();
  const CapacityRequest a = Ask(s, "a", 1, 2);
  const CapacityRequest other = Ask(s, "other", 1, 2);  // Fills the other node.
  const NodeRef ref{"c", s.FindNode(NodeOf(s, a.id))->name};
  ChangeSet ch;
  EXPECT_THAT(RemoveNode(s, ref, ch),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(StartsWith("name: "), HasSubstr(absl::StrCat(a.id)))));
  EXPECT_TRUE(ch.empty());
  ASSERT_THAT(ReleaseRequest(s, a.id, kT0, ch), IsOk());
  ChangeSet removed;
  ASSERT_THAT(RemoveNode(s, ref, removed), IsOk());
  ASSERT_EQ(removed.changes.size(), 1u);
  EXPECT_EQ(std::get<NodeWrite>(removed.changes[0]).event, NodeEvent::kRemove);
  EXPECT_EQ(s.FindNode(ref.cluster, ref.name), nullptr);
  EXPECT_THAT(CordonNode(s, ref, true, kT0, ch), StatusIs(absl::StatusCode::kNotFound));
  // Nothing is placed on it; the name can be registered again.
  const CapacityRequest b = Ask(s, "b", 1, 2);
  EXPECT_EQ(b.state, RequestState::kQueued);
  ChangeSet back;
  ASSERT_THAT(RegisterNode(s, MakeNode(ref.name, 2, "H100-80GB"), kT0, back), IsOk());
  EXPECT_EQ(s.FindLiveRequest(b.id)->state, RequestState::kAdmitted);
  EXPECT_EQ(s.FindLiveRequest(other.id)->state, RequestState::kAdmitted);
}

TEST(NodesTest, HeartbeatsThatStopMakeANodeUnreachableUntilTheNextOne) {
  State s = TwoNodes();
  s.set_node_heartbeat_timeout(absl::Seconds(60));
  ChangeSet first;
  ASSERT_THAT(NodeHeartbeat(s, kN1, kT0, first), IsOk());
  EXPECT_EQ(first.changes.size(), 1u);  // The first one is recorded.
  ChangeSet more;
  ASSERT_THAT(NodeHeartbeat(s, kN1, kT0 + absl::Seconds(30), more), IsOk());
  EXPECT_TRUE(more.empty());  // The others are not.
  ChangeSet quiet;
  Tick(s, kT0 + absl::Seconds(90), quiet);
  EXPECT_TRUE(quiet.empty());
  ChangeSet lost;
  Tick(s, kT0 + absl::Seconds(91), lost);
  ASSERT_EQ(lost.changes.size(), 1u);
  EXPECT_EQ(std::get<NodeWrite>(lost.changes[0]).event, NodeEvent::kUnreachable);
  EXPECT_EQ(s.FindNode("c", "n1")->health, NodeHealth::kUnreachable);
  // n2 never heartbeats: it is never timed. Only n2 takes work now.
  const CapacityRequest a = Ask(s, "a", 1, 2, kT0 + absl::Seconds(92));
  const CapacityRequest b = Ask(s, "b", 1, 2, kT0 + absl::Seconds(92));
  EXPECT_EQ(NodeOf(s, a.id), s.FindNode("c", "n2")->id);
  EXPECT_EQ(b.state, RequestState::kQueued);
  ChangeSet back;
  ASSERT_THAT(NodeHeartbeat(s, kN1, kT0 + absl::Seconds(100), back), IsOk());
  EXPECT_EQ(s.FindNode("c", "n1")->health, NodeHealth::kHealthy);
  EXPECT_EQ(s.FindLiveRequest(b.id)->state, RequestState::kAdmitted);
}

TEST(NodesTest, AFailedNodeUncordonedIsTimedAgain) {
  State s = TwoNodes();
  s.set_node_heartbeat_timeout(absl::Seconds(60));
  ChangeSet ch;
  ASSERT_THAT(NodeHeartbeat(s, kN1, kT0, ch), IsOk());
  ASSERT_THAT(FailNode(s, kN1, absl::InfinitePast(), kT0 + absl::Seconds(5), ch), IsOk());
  Tick(s, kT0 + absl::Seconds(61), ch);  // Failed: not timed; nothing else is.
  ASSERT_THAT(CordonNode(s, kN1, false, kT0 + absl::Seconds(100), ch), IsOk());
  ASSERT_THAT(NodeHeartbeat(s, kN1, kT0 + absl::Seconds(110), ch), IsOk());
  ChangeSet lost;
  Tick(s, kT0 + absl::Seconds(171), lost);
  EXPECT_EQ(s.FindNode("c", "n1")->health, NodeHealth::kUnreachable);
}

TEST(NodesTest, UpdatesKeepWhatANodeInUseCannotChange) {
  State s = TwoNodes();
  const CapacityRequest a = Ask(s, "a", 1, 2);
  Node facts = *s.FindNode(NodeOf(s, a.id));
  facts.topology_domain = "rack-7";
  facts.gpus[0].uuid = "GPU-0a1b";
  ChangeSet ch;
  ASSERT_THAT(UpdateNode(s, facts, kT0, ch), IsOk());
  EXPECT_EQ(s.FindNode(facts.id)->topology_domain, "rack-7");
  EXPECT_EQ(s.FindGpuByUuid("GPU-0a1b")->first, facts.id);
  ChangeSet same;  // The same facts again (an agent's refresh): nothing recorded.
  ASSERT_THAT(UpdateNode(s, facts, kT0, same), IsOk());
  EXPECT_TRUE(same.empty());
  struct Case {
    const char* field;
    void (*edit)(Node&);
    absl::StatusCode code;
  };
  for (const Case& c : std::vector<Case>{
           {"node.pool", [](Node& n) { n.pool = "batch"; }, absl::StatusCode::kFailedPrecondition},
           {"node.gpus[1].model", [](Node& n) { n.gpus[1].model = "L4"; },
            absl::StatusCode::kFailedPrecondition},
           {"node.gpus:", [](Node& n) { n.gpus.pop_back(); },
            absl::StatusCode::kFailedPrecondition},
           {"node.cpu_milli", [](Node& n) { n.cpu_milli = 0; }, absl::StatusCode::kInvalidArgument},
           {"name:", [](Node& n) { n.name = "nope"; }, absl::StatusCode::kNotFound}}) {
    SCOPED_TRACE(c.field);
    Node bad = facts;
    c.edit(bad);
    ChangeSet none;
    EXPECT_THAT(UpdateNode(s, bad, kT0, none), StatusIs(c.code, StartsWith(c.field)));
    EXPECT_TRUE(none.empty());
  }
  // A UUID another node has is refused.
  const bool on_n1 = NodeOf(s, a.id) == s.FindNode("c", "n1")->id;
  Node other = *s.FindNode("c", on_n1 ? "n2" : "n1");
  other.gpus[0].uuid = "GPU-0a1b";
  EXPECT_THAT(UpdateNode(s, other, kT0, ch), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(NodesTest, BadReferencesNameTheField) {
  State s = TwoNodes();
  ChangeSet ch;
  EXPECT_THAT(CordonNode(s, {"", "n1"}, true, kT0, ch),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster:")));
  EXPECT_THAT(DrainNode(s, {"c", "zz"}, 0, kT0, ch),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("name:")));
  EXPECT_THAT(DrainNode(s, kN1, -1, kT0, ch),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("grace_seconds:")));
  EXPECT_THAT(FailNode(s, kN1, kT0 + absl::Seconds(1), kT0, ch),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("failed_at:")));
  EXPECT_THAT(NodeHeartbeat(s, {"c", "n 1"}, kT0, ch),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("name:")));
  EXPECT_TRUE(ch.empty());
  EXPECT_TRUE(s.FindNode("c", "n1")->schedulable());
}

}  // namespace
}  // namespace arbiter::core
