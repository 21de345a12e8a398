#include "clients/kube/informer.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

// A watch stays open this long before the informer resumes it (the API
// server ends it then): bounded, so that a silently dead stream is noticed.
constexpr int kWatchSeconds = 300;

void Pause(absl::Duration d, const std::atomic<bool>& stop) {
  const absl::Time until = absl::Now() + d;
  while (!stop.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
}

std::string VersionOf(const json& object) {
  if (!object.is_object() || !object.contains("metadata")) return "";
  const json& meta = object["metadata"];
  return meta.is_object() && meta.contains("resourceVersion") && meta["resourceVersion"].is_string()
             ? meta["resourceVersion"].get<std::string>()
             : "";
}

}  // namespace

Informer::Informer(const KubeApi& api, std::string collection, InformerCallbacks callbacks,
                   absl::Duration backoff)
    : api_(api),
      collection_(std::move(collection)),
      callbacks_(std::move(callbacks)),
      backoff_(backoff) {}

void Informer::Run(const std::atomic<bool>& stop) {
  bool listed = false;
  while (!stop.load()) {
    if (!listed) {
      listed = List();
      if (!listed) {
        Pause(backoff_, stop);
        continue;
      }
    }
    listed = WatchOnce(stop);
  }
}

bool Informer::List() {
  lists_.fetch_add(1);
  std::vector<json> items;
  std::string next;
  std::string version;
  do {
    std::string path = absl::StrCat(collection_, "?limit=500");
    if (!next.empty()) absl::StrAppend(&path, "&continue=", QueryEscape(next));
    absl::StatusOr<KubeReply> reply = api_.Call("GET", path);
    if (!reply.ok() || reply->code != 200) {
      callbacks_.error(reply.ok() ? absl::StrCat("GET ", path, ": HTTP ", reply->code, ": ",
                                                 reply->body.substr(0, 300))
                                  : std::string(reply.status().message()));
      return false;  // A 410 for an expired continue token lists from the start.
    }
    json page = json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
    if (!page.is_object() || !page.contains("items") || !page["items"].is_array()) {
      callbacks_.error(absl::StrCat("GET ", path, ": not a list"));
      return false;
    }
    for (json& item : page["items"]) items.push_back(std::move(item));
    version = VersionOf(page);
    next = page["metadata"].is_object() ? page["metadata"].value("continue", "") : "";
  } while (!next.empty());
  resource_version_ = version;
  callbacks_.reset(items);
  return true;
}

bool Informer::WatchOnce(const std::atomic<bool>& stop) {
  const std::string path =
      absl::StrCat(collection_, "?watch=1&allowWatchBookmarks=true&timeoutSeconds=", kWatchSeconds,
                   "&resourceVersion=", QueryEscape(resource_version_));
  bool expired = false;
  auto on_line = [&](const std::string& line) {
    json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object() || !event.contains("type") || !event["type"].is_string() ||
        !event.contains("object")) {
      callbacks_.error(
          absl::StrCat("watch ", collection_, ": not an event: ", line.substr(0, 200)));
      return false;
    }
    const std::string type = event["type"].get<std::string>();
    const json& object = event["object"];
    if (type == "ERROR") {
      expired = object.is_object() && object.value("code", 0) == 410;
      if (!expired) callbacks_.error(absl::StrCat("watch ", collection_, ": ", object.dump()));
      return false;
    }
    if (std::string v = VersionOf(object); !v.empty()) resource_version_ = v;
    if (type != "BOOKMARK") callbacks_.event(type, object);
    return true;
  };
  absl::Status status = api_.Watch(path, on_line, stop);
  if (expired) return false;
  if (status.ok() || stop.load()) return true;
  // An HTTP 410 answers the watch itself when the version is too old.
  if (absl::StrContains(status.message(), "HTTP 410")) return false;
  callbacks_.error(std::string(status.message()));
  Pause(backoff_, stop);
  return true;
}

}  // namespace arbiter::kube
