#include "tests/core/scenario_runner.h"

#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/budget.h"

namespace arbiter::testing {
namespace {

using core::ChangeSet;
using core::State;

struct Line {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> named;
};

Line Parse(absl::string_view text) {
  Line line;
  std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipWhitespace());
  line.command = words[0];
  for (size_t i = 1; i < words.size(); ++i) {
    std::vector<std::string> kv = absl::StrSplit(words[i], absl::MaxSplits('=', 1));
    if (kv.size() == 2) {
      line.named[kv[0]] = kv[1];
    } else {
      line.positional.push_back(words[i]);
    }
  }
  return line;
}

class Scenario {
 public:
  explicit Scenario(std::string where) : where_(std::move(where)) {}

  // Executes one command; errors are gtest failures naming the line.
  void Run(const Line& l, int lineno) {
    SCOPED_TRACE(absl::StrCat(where_, ":", lineno));
    if (l.command == "expect-error") {
      ExpectError(l);
    } else if (l.command == "expect") {
      Expect(l);
    } else if (l.command == "expect-used") {
      const int64_t used =
          l.named.contains("model")
              ? state_.UsedMilli(l.positional.at(0), l.positional.at(1), Get(l, "model"))
              : state_.UsedMilli(l.positional.at(0), l.positional.at(1));
      EXPECT_EQ(used, Int(l.positional.at(2)));
    } else if (l.command == "expect-spend") {
      // expect-spend TEAM MICROS: this month's (at the current time).
      EXPECT_EQ(state_.Spend(l.positional.at(0), core::MonthStart(now_)), Int(l.positional.at(1)));
    } else if (l.command == "expect-price") {
      // expect-price MODEL CLASS AT_SECONDS MICROS (or "none")
      const auto price =
          core::PriceAt(state_, l.positional.at(0), core::LatencyClassFromName(l.positional.at(1)),
                        Time(l.positional.at(2)));
      EXPECT_EQ(price.has_value() ? absl::StrCat(*price) : "none", l.positional.at(3));
    } else if (l.command == "expect-gpu") {
      ExpectGpu(l);
    } else if (l.command == "expect-layout") {
      const core::Node* node = state_.FindNode("c", l.positional.at(0));
      ASSERT_NE(node, nullptr);
      const core::Gpu& gpu = node->gpus.at(Int(l.positional.at(1)));
      const std::string want = l.positional.at(2) == "-" ? "" : l.positional.at(2);
      EXPECT_EQ(core::FormatMigLayout(gpu.mig_layout), want);
    } else if (l.command == "at") {
      now_ = Time(l.positional.at(0));
    } else {
      const absl::Status status = Mutate(l);
      EXPECT_TRUE(status.ok()) << l.command << ": " << status;
    }
  }

 private:
  static int64_t Int(const std::string& s) {
    int64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(s, &v)) << "not a number: " << s;
    return v;
  }
  // Scenario times are seconds after a fixed epoch.
  static absl::Time Time(const std::string& seconds) {
    return absl::FromUnixSeconds(1'800'000'000 + Int(seconds));
  }
  static std::string Get(const Line& l, const std::string& key, const std::string& def = "") {
    auto it = l.named.find(key);
    return it == l.named.end() ? def : it->second;
  }

  core::CapacityRequestSpec Spec(const Line& l) {
    core::CapacityRequestSpec spec;
    spec.idempotency_key = l.positional.at(0);
    spec.team = Get(l, "team");
    spec.pool = Get(l, "pool");
    spec.workload_class = core::WorkloadClassFromName(Get(l, "class", "inference"));
    spec.members = static_cast<int32_t>(Int(Get(l, "members", "1")));
    if (l.named.contains("mig")) {
      spec.shape.gpu = core::MigShape{Get(l, "mig"), 0};
    } else if (l.named.contains("milli")) {
      spec.shape.gpu = core::GpuFraction{Int(Get(l, "milli")), Int(Get(l, "gpu_mem", "1024"))};
    } else {
      spec.shape.gpu = static_cast<int32_t>(Int(Get(l, "gpus", "1")));
    }
    spec.topology = core::TopologyFromName(Get(l, "topology", "any"));
    spec.shape.cpu_milli = Int(Get(l, "cpu", "0"));
    spec.shape.memory_mib = Int(Get(l, "mem", "0"));
    if (l.named.contains("models")) spec.gpu_models = absl::StrSplit(Get(l, "models"), '|');
    spec.priority = static_cast<int32_t>(Int(Get(l, "priority", "0")));
    spec.preemptible = Get(l, "preemptible") == "true";
    spec.guaranteed = Get(l, "guaranteed") == "true";
    spec.spot = Get(l, "spot") == "true";
    spec.burst_seconds = Int(Get(l, "burst", "0"));
    spec.checkpoint_seconds = Int(Get(l, "ckpt", "0"));
    spec.checkpoint_interval_seconds = Int(Get(l, "ckpt_every", "0"));
    if (l.named.contains("start")) spec.start_at = Time(Get(l, "start"));
    spec.duration = absl::Seconds(Int(Get(l, "duration", "0")));
    return spec;
  }

  absl::Status Mutate(const Line& l) {
    ChangeSet ch;
    const std::string name = l.positional.empty() ? "" : l.positional[0];
    if (l.command == "model") {
      return state_.LoadGpuModel(
          {name, Int(Get(l, "memory_mib", "81920")), 100, 300, Get(l, "mig") == "true"});
    }
    if (l.command == "cluster") return core::CreateCluster(state_, {name, ""}, ch);
    if (l.command == "pool") {
      core::Pool pool{name, core::LatencyClassFromName(Get(l, "class")), ""};
      if (l.named.contains("lends")) {
        for (absl::string_view c : absl::StrSplit(Get(l, "lends"), '|')) {
          pool.lends_to.push_back(core::WorkloadClassFromName(c));
        }
      }
      // rules=inference:borrow|training:deny: the pool's class rules; a rule
      // may take a window after '@', with '_' for spaces:
      // training:borrow@weekdays_01:00-06:00_Europe/Berlin.
      if (l.named.contains("rules")) {
        for (absl::string_view rule : absl::StrSplit(Get(l, "rules"), '|')) {
          const std::pair<std::string, std::string> rule_window =
              absl::StrSplit(rule, absl::MaxSplits('@', 1));
          const std::pair<std::string, std::string> parts = absl::StrSplit(rule_window.first, ':');
          core::PoolClassRule r{core::WorkloadClassFromName(parts.first),
                                core::ClassAdmissionFromName(parts.second)};
          if (!rule_window.second.empty()) {
            const std::string field =
                absl::StrCat("pool.class_rules[", pool.class_rules.size(), "].window");
            absl::StatusOr<core::RecurringWindow> window = core::ParseRecurringWindow(
                absl::StrReplaceAll(rule_window.second, {{"_", " "}}), field);
            if (!window.ok()) return window.status();
            r.window = *window;
          }
          pool.class_rules.push_back(std::move(r));
        }
      }
      pool.reclaim_grace_seconds = Int(Get(l, "grace", "30"));
      if (l.named.contains("spot_grace")) pool.spot_grace_seconds = Int(Get(l, "spot_grace"));
      // headroom=L4:1000|H100:500 max_burst=SECONDS
      if (l.named.contains("headroom")) {
        for (absl::string_view h : absl::StrSplit(Get(l, "headroom"), '|')) {
          const std::pair<std::string, std::string> parts = absl::StrSplit(h, ':');
          pool.headroom.push_back({parts.first, Int(parts.second)});
        }
      }
      pool.max_burst_seconds = Int(Get(l, "max_burst", "0"));
      return core::CreatePool(state_, pool, ch);
    }
    if (l.command == "node") {
      core::Node node;
      node.cluster = Get(l, "cluster", "c");
      node.name = name;
      node.pool = Get(l, "pool");
      node.topology_domain = Get(l, "domain");
      node.cpu_milli = Int(Get(l, "cpu", "64000"));
      node.memory_mib = Int(Get(l, "mem", "524288"));
      for (int32_t g = 0; g < Int(Get(l, "gpus")); ++g) {
        node.gpus.push_back(core::Gpu{g, Get(l, "model")});
        // mig_report=3g.40gb:4;1g.10gb:0,1: what the node reports for each GPU.
        absl::Status parsed =
            core::ParseMigReports(Get(l, "mig_report"), &node.gpus.back().reported_mig);
        if (!parsed.ok()) return parsed;
      }
      return Record(ch, core::RegisterNode(state_, node, now_, ch).status());
    }
    if (l.command == "team") {
      return core::CreateTeam(state_, {name, Get(l, "parent"), Int(Get(l, "weight", "1000"))}, ch);
    }
    if (l.command == "quota") {
      core::Quota quota{name, l.positional.at(1), Int(l.positional.at(2))};
      quota.gpu_model = Get(l, "model");
      const std::string borrow = Get(l, "borrow", "0");
      quota.borrowing_limit_milli = borrow == "unlimited" ? core::kUnlimited : Int(borrow);
      if (l.named.contains("lend")) quota.lending_limit_milli = Int(Get(l, "lend"));
      if (l.named.contains("cohort_lend")) {
        quota.cohort_lending_limit_milli = Int(Get(l, "cohort_lend"));
      }
      if (l.named.contains("cohort_borrow")) {
        quota.cohort_borrowing_limit_milli = Int(Get(l, "cohort_borrow"));
      }
      return Record(ch, core::SetQuota(state_, quota, now_, ch));
    }
    if (l.command == "rule") {
      // rule CLASS_A CLASS_B ISOLATION [same_node=false]
      core::ClassRule rule;
      rule.a = core::WorkloadClassFromName(l.positional.at(0));
      rule.b = core::WorkloadClassFromName(l.positional.at(1));
      rule.rule.gpu = core::IsolationFromName(l.positional.at(2));
      rule.rule.same_node = Get(l, "same_node", "true") == "true";
      return Record(ch, core::SetCoexistenceRule(state_, rule, now_, ch));
    }
    if (l.command == "authority") {
      // authority POOL|- ACTION APPROVER [limit=N] [threshold=N]
      core::AuthorityRule rule;
      rule.pool = l.positional.at(0) == "-" ? "" : l.positional.at(0);
      rule.action = core::ApprovalActionFromName(l.positional.at(1));
      rule.approver = l.positional.at(2);
      rule.limit_milli = Int(Get(l, "limit", "-1"));
      rule.threshold_milli = Int(Get(l, "threshold", "0"));
      rule.threshold_seconds = Int(Get(l, "threshold_s", "0"));
      rule.limit_seconds = Int(Get(l, "limit_s", "-1"));
      rule.limit_micros = Int(Get(l, "limit_micros", "-1"));
      return Record(ch, core::SetAuthorityRule(state_, rule, ch));
    }
    if (l.command == "approve" || l.command == "deny") {
      // approve KEY as=PRINCIPAL [groups=a|b]; deny KEY as=PRINCIPAL reason=WORD
      core::Approver who;
      who.principal = Get(l, "as");
      if (l.named.contains("groups")) who.groups = absl::StrSplit(Get(l, "groups"), '|');
      auto it = ids_.find(name);
      const int64_t id = it == ids_.end() ? 0 : it->second;
      auto out = l.command == "approve"
                     ? core::ApproveRequest(state_, id, who, now_, ch)
                     : core::DenyRequest(state_, id, who, Get(l, "reason"), now_, ch);
      return Record(ch, out.status());
    }
    if (l.command == "delegate") {
      // delegate FROM TO until=SECONDS [as=CALLER]
      core::Delegation d{l.positional.at(0), l.positional.at(1), Time(Get(l, "until", "0"))};
      return Record(ch, core::Delegate(state_, d, Get(l, "as", d.from), now_, ch));
    }
    if (l.command == "price") {
      // price MODEL CLASS MICROS_PER_GPU_HOUR [from=SECONDS] [burst=MICROS]
      core::Price price{l.positional.at(0), core::LatencyClassFromName(l.positional.at(1)),
                        Int(l.positional.at(2)), Time(Get(l, "from", "0")),
                        Int(Get(l, "burst", "0"))};
      return Record(ch, core::SetPrice(state_, price, ch));
    }
    if (l.command == "power") {
      // power SCOPE NAME WATTS [reclaim=true]
      core::PowerBudget budget{core::PowerScopeFromName(l.positional.at(0)), l.positional.at(1),
                               Int(l.positional.at(2)), Get(l, "reclaim") == "true"};
      return Record(ch, core::SetPowerBudget(state_, budget, now_, ch));
    }
    if (l.command == "budget") {
      // budget TEAM soft=MICROS hard=MICROS [over=deny|approval]
      core::Budget budget{name, Int(Get(l, "soft", "0")), Int(Get(l, "hard", "0")),
                          Get(l, "over", "deny") == "approval" ? core::OverBudget::kApproval
                                                               : core::OverBudget::kDeny};
      return Record(ch, core::SetBudget(state_, budget, ch));
    }
    if (l.command == "tick") {
      core::Tick(state_, now_, ch);
      return Record(ch, absl::OkStatus());
    }
    if (l.command == "request") {
      auto out = core::RequestCapacity(state_, Spec(l), now_, ch);
      if (out.ok() && !out->replayed) {
        ids_[name] = out->request.id;
        keys_[out->request.id] = name;
      }
      return Record(ch, out.status());
    }
    if (l.command == "release") {
      auto it = ids_.find(name);
      auto out = core::ReleaseRequest(state_, it == ids_.end() ? 0 : it->second, now_, ch);
      return Record(ch, out.status());
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown command ", l.command));
  }

  // Remembers the last state written for each request in `ch`, so that
  // requests that have left the live state can still be checked.
  absl::Status Record(const ChangeSet& ch, absl::Status status) {
    for (const core::Change& c : ch.changes) {
      if (const auto* w = std::get_if<core::RequestWrite>(&c)) {
        auto key = keys_.find(w->request.id);
        if (key != keys_.end())
          final_[key->second] = std::string(core::RequestStateName(w->request.state));
      }
    }
    return status;
  }

  void ExpectError(const Line& l) {
    const std::string code = l.positional.at(0);
    const std::string field = l.positional.at(1);
    std::vector<std::string> rest(l.positional.begin() + 2, l.positional.end());
    Line inner;
    inner.command = rest.at(0);
    inner.positional.assign(rest.begin() + 1, rest.end());
    inner.named = l.named;
    const absl::Status status = Mutate(inner);
    EXPECT_EQ(absl::StatusCodeToString(status.code()), code) << status;
    if (field != "-") {
      EXPECT_TRUE(absl::StartsWith(status.message(), field + ":")) << status;
    }
  }

  void Expect(const Line& l) {
    const std::string key = l.positional.at(0);
    auto id = ids_.find(key);
    ASSERT_NE(id, ids_.end()) << "no request " << key;
    const core::IdempotencyEntry* entry = state_.FindIdempotencyKey(key);
    ASSERT_NE(entry, nullptr);
    const core::CapacityRequest* live = state_.FindLiveRequest(id->second);
    const std::string want = l.positional.at(1);
    if (live == nullptr) {
      // Finished requests leave the state; their last outcome was recorded.
      EXPECT_EQ(final_[key], want) << key;
      return;
    }
    EXPECT_EQ(std::string(core::RequestStateName(live->state)), want)
        << key << ": " << live->reason;
    if (l.named.contains("reason")) {
      EXPECT_EQ(live->reason_code, Get(l, "reason")) << key << ": " << live->reason;
    }
    if (l.named.contains("deadline")) {
      EXPECT_EQ(live->preempt_deadline, Time(Get(l, "deadline"))) << key;
    }
    if (l.named.contains("by")) {
      EXPECT_EQ(live->preempted_by, ids_.at(Get(l, "by"))) << key;
    }
    if (l.named.contains("cost")) {
      EXPECT_EQ(live->cost_micros, Int(Get(l, "cost"))) << key;
    }
    if (l.named.contains("warns")) {
      EXPECT_EQ(absl::StrContains(live->reason, "budget warning"), Get(l, "warns") == "true")
          << key << ": " << live->reason;
    }
    if (l.named.contains("spot")) {
      EXPECT_EQ(live->spec.spot, Get(l, "spot") == "true") << key;
      EXPECT_EQ(live->spec.preemptible || !live->spec.spot, true) << key;
    }
    if (l.named.contains("quota_model")) {
      EXPECT_EQ(live->quota_model, Get(l, "quota_model")) << key;
    }
    const size_t member = static_cast<size_t>(Int(Get(l, "member", "0")));
    if (l.named.contains("node") || l.named.contains("gpus")) {
      ASSERT_LT(member, live->placements.size()) << key;
      const core::Placement& p = live->placements[member];
      if (l.named.contains("node")) {
        EXPECT_EQ(state_.FindNode(p.node_id)->name, Get(l, "node"));
      }
      if (l.named.contains("gpus")) {
        EXPECT_EQ(absl::StrJoin(p.gpu_indices, ","), Get(l, "gpus"));
      }
    }
  }

  void ExpectGpu(const Line& l) {
    const core::Node* node = state_.FindNode(Get(l, "cluster", "c"), l.positional.at(0));
    ASSERT_NE(node, nullptr);
    const core::Gpu& gpu = node->gpus.at(Int(l.positional.at(1)));
    EXPECT_EQ(gpu.allocated_milli, Int(Get(l, "milli")));
    if (l.named.contains("mem")) {
      EXPECT_EQ(gpu.allocated_memory_mib, Int(Get(l, "mem")));
    }
    if (l.named.contains("exclusive")) {
      EXPECT_EQ(gpu.exclusive ? "true" : "false", Get(l, "exclusive"));
    }
  }

  std::string where_;
  State state_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  std::map<std::string, int64_t> ids_;
  std::map<int64_t, std::string> keys_;
  std::map<std::string, std::string> final_;  // Key -> last state seen.
};

}  // namespace

void RunScenarioFile(const std::string& path) {
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  Scenario scenario(path);
  std::string text;
  bool named = false, described = false;
  for (int lineno = 1; std::getline(in, text); ++lineno) {
    absl::string_view line = absl::StripAsciiWhitespace(text);
    if (absl::StartsWith(line, "# name:")) named = true;
    if (absl::StartsWith(line, "# description:")) described = true;
    if (line.empty() || line[0] == '#') continue;
    scenario.Run(Parse(line), lineno);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_TRUE(named && described) << path << " needs '# name:' and '# description:' headers";
}

}  // namespace arbiter::testing
