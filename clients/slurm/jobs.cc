#include "clients/slurm/jobs.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include <nlohmann/json.hpp>

namespace arbiter::slurm {
namespace {

using nlohmann::json;

const json& Field(const json& object, const char* key) {
  static const json kNull;
  return object.is_object() && object.contains(key) ? object[key] : kNull;
}

std::string Text(const json& object, const char* key) {
  const json& v = Field(object, key);
  return v.is_string() ? v.get<std::string>() : "";
}

// A number field; `fallback` when absent or not a number.
int64_t Number(const json& object, const char* key, int64_t fallback = 0) {
  const json& v = Field(object, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? fallback : static_cast<int64_t>(u);
  }
  return fallback;
}

// Slurm's "no value" and "infinite" for 32-bit fields.
constexpr int64_t kNoVal32 = 0xfffffffe;
constexpr int64_t kInfinite32 = 0xffffffff;

}  // namespace

absl::StatusOr<GpuAsk> ParseGpuTres(absl::string_view tres) {
  GpuAsk ask;
  for (absl::string_view item : absl::StrSplit(tres, ',', absl::SkipWhitespace())) {
    absl::string_view rest = item;
    if (!absl::ConsumePrefix(&rest, "gres:") && !absl::ConsumePrefix(&rest, "gres/")) continue;
    if (!absl::ConsumePrefix(&rest, "gpu")) continue;
    if (!rest.empty() && rest[0] != ':' && rest[0] != '=') continue;  // gpumem, say.
    ask.any = true;
    ask.per_node = 1;
    if (rest.empty()) return ask;
    rest.remove_prefix(1);
    // TYPE:N, TYPE=N, N or TYPE.
    const size_t sep = rest.find_last_of(":=");
    absl::string_view type = sep == absl::string_view::npos ? "" : rest.substr(0, sep);
    absl::string_view count = sep == absl::string_view::npos ? rest : rest.substr(sep + 1);
    int32_t n = 0;
    if (!absl::SimpleAtoi(count, &n)) {
      if (sep != absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("GPU count in '", item, "' is not a number"));
      }
      type = count;  // "gres:gpu:h100": one of that type.
      n = 1;
    }
    if (n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("GPU count in '", item, "' must be > 0"));
    }
    ask.type = std::string(type);
    ask.per_node = n;
    return ask;
  }
  return ask;
}

absl::StatusOr<std::vector<std::string>> ExpandHostList(absl::string_view list) {
  std::vector<std::string> hosts;
  size_t i = 0;
  while (i < list.size()) {
    // One item: a prefix, then optionally [ranges], then a suffix, up to a
    // comma outside brackets.
    size_t end = i;
    int depth = 0;
    while (end < list.size() && (depth > 0 || list[end] != ',')) {
      if (list[end] == '[') ++depth;
      if (list[end] == ']' && --depth < 0) break;
      ++end;
    }
    if (depth != 0 || (end < list.size() && list[end] == ']')) {
      return absl::InvalidArgumentError(absl::StrCat("host list '", list, "': unbalanced '['"));
    }
    absl::string_view item = list.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    const size_t open = item.find('[');
    if (open == absl::string_view::npos) {
      hosts.emplace_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    absl::string_view prefix = item.substr(0, open);
    absl::string_view ranges = item.substr(open + 1, close - open - 1);
    absl::string_view suffix = item.substr(close + 1);
    if (suffix.find('[') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("host list '", list, "': one bracketed range per name"));
    }
    for (absl::string_view range : absl::StrSplit(ranges, ',')) {
      std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
      if (ends.size() == 1) ends.push_back(ends[0]);
      int64_t from = 0, to = 0;
      if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &from) ||
          !absl::SimpleAtoi(ends[1], &to) || from > to || to - from > 100000) {
        return absl::InvalidArgumentError(
            absl::StrCat("host list '", list, "': bad range '", range, "'"));
      }
      const size_t width = ends[0].size();
      for (int64_t n = from; n <= to; ++n) {
        std::string number = absl::StrCat(n);
        if (number.size() < width) number.insert(0, width - number.size(), '0');
        hosts.push_back(absl::StrCat(prefix, number, suffix));
      }
    }
  }
  return hosts;
}

std::string AdminCommentFor(int64_t request, int32_t restart_count) {
  return absl::StrCat("arbiter:request=", request, ";restart=", restart_count);
}

int64_t RequestIn(absl::string_view admin_comment, int32_t restart_count) {
  absl::string_view rest = admin_comment;
  if (!absl::ConsumePrefix(&rest, "arbiter:request=")) return 0;
  std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(rest, ";restart=");
  int64_t request = 0;
  int32_t restart = 0;
  if (!absl::SimpleAtoi(parts.first, &request) || !absl::SimpleAtoi(parts.second, &restart) ||
      restart != restart_count || request <= 0) {
    return 0;
  }
  return request;
}

bool SlurmJob::Active() const {
  return state == "RUNNING" || state == "CONFIGURING" || state == "COMPLETING" ||
         state == "SUSPENDED" || state == "SIGNALING" || state == "STAGE_OUT";
}

bool SlurmJob::Ended() const {
  static const std::set<std::string>* ended =
      new std::set<std::string>{"COMPLETED", "FAILED",        "CANCELLED", "TIMEOUT",  "NODE_FAIL",
                                "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"};
  return ended->count(state) > 0;
}

absl::StatusOr<std::vector<SlurmJob>> ParseSqueueJson(absl::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !Field(doc, "jobs").is_array()) {
    return absl::InvalidArgumentError("squeue --json: not a document with a 'jobs' array");
  }
  std::vector<SlurmJob> jobs;
  for (const json& j : doc["jobs"]) {
    SlurmJob job;
    job.id = Number(j, "job_id");
    if (job.id <= 0) return absl::InvalidArgumentError("squeue --json: a job without job_id");
    const std::string where = absl::StrCat("job ", job.id, ": ");
    job.name = Text(j, "name");
    job.user = Text(j, "user_name");
    job.state = Text(j, "job_state");
    job.reason = Text(j, "state_reason");
    job.held = Number(j, "priority", -1) == 0;
    job.account = Text(j, "account");
    job.partition = Text(j, "partition");
    job.qos = Text(j, "qos");
    job.nodes = static_cast<int32_t>(Number(j, "node_count", 1));
    job.comment = Text(j, "comment");
    job.admin_comment = Text(j, "admin_comment");
    job.restart_count = static_cast<int32_t>(Number(j, "restart_cnt"));
    job.requeue = Field(j, "requeue").is_boolean() && j["requeue"].get<bool>();
    job.start_time = std::max<int64_t>(0, Number(j, "start_time"));
    job.end_time = std::max<int64_t>(0, Number(j, "end_time"));
    const int64_t limit = Number(j, "time_limit");
    job.time_limit_minutes = limit == kNoVal32 || limit == kInfinite32 ? 0 : limit;
    absl::StatusOr<GpuAsk> gpus = ParseGpuTres(Text(j, "tres_per_node"));
    if (!gpus.ok()) return absl::InvalidArgumentError(where + std::string(gpus.status().message()));
    job.gpus = *gpus;
    for (const char* key : {"tres_per_job", "tres_per_task", "tres_per_socket"}) {
      absl::StatusOr<GpuAsk> other = ParseGpuTres(Text(j, key));
      if (!other.ok() || other->any) job.gpus_not_per_node = true;
    }
    absl::StatusOr<std::vector<std::string>> nodes = ExpandHostList(Text(j, "nodes"));
    if (!nodes.ok())
      return absl::InvalidArgumentError(where + std::string(nodes.status().message()));
    job.node_list = *std::move(nodes);
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace arbiter::slurm
