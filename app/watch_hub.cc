#include "app/watch_hub.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include "app/thread_name.h"
#include "core/status_macros.h"
#include "ledger/entries.h"

namespace arbiter::app {
namespace {

// A catching-up stream is fed while it has fewer events than this waiting.
constexpr size_t kCatchUpBacklog = 1024;
// Ledger entries read from the store per catch-up step.
constexpr int32_t kStorePage = 512;
// Window events scanned per catch-up step.
constexpr size_t kWindowScan = 4096;

absl::Status Resume(int64_t revision, absl::string_view why) {
  return absl::UnavailableError(
      absl::StrCat(why, "; resume from the last revision received (", revision, ")"));
}

void Visit(const absl::flat_hash_set<int64_t>* ids, const std::function<void(int64_t)>& fn) {
  if (ids == nullptr) return;
  for (int64_t id : *ids) fn(id);
}

template <typename Map, typename Key>
const absl::flat_hash_set<int64_t>* Find(const Map& map, const Key& key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// How much sooner than a whole period a new stream's first bookmark comes:
// a point of [0, period) spread over the ids by the golden ratio, so that
// streams subscribed together get their bookmarks spread over the period.
absl::Duration FirstBookmarkLead(int64_t id, absl::Duration period) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15u;
  const double fraction = static_cast<double>((static_cast<uint64_t>(id) * kGolden) >> 11) /
                          static_cast<double>(1ull << 53);
  return absl::Nanoseconds(static_cast<int64_t>(fraction * absl::ToDoubleNanoseconds(period)));
}

}  // namespace

WatchBatchPtr MakeWatchBatch(std::vector<WatchEventPtr> events) {
  auto batch = std::make_shared<WatchBatch>();
  size_t bytes = 0;
  for (const WatchEventPtr& e : events) bytes += e->encoded.size();
  batch->encoded.reserve(bytes);
  for (const WatchEventPtr& e : events) batch->encoded.append(e->encoded);
  batch->events = std::move(events);
  return batch;
}

EventType EventTypeOfState(core::RequestState state) {
  switch (state) {
    case core::RequestState::kQueued:
      return EventType::kQueued;
    case core::RequestState::kDenied:
      return EventType::kDenied;
    case core::RequestState::kReleased:
      return EventType::kReleased;
    case core::RequestState::kCancelled:
      return EventType::kCancelled;
    case core::RequestState::kPreempting:
      return EventType::kPreempting;
    case core::RequestState::kPreempted:
      return EventType::kPreempted;
    case core::RequestState::kReserved:
      return EventType::kReserved;
    case core::RequestState::kPendingApproval:
      return EventType::kPendingApproval;
    default:
      return EventType::kAdmitted;
  }
}

bool WatchFilter::Matches(const WatchEvent& e) const {
  const AllocationEvent& ev = e.event;
  if (types != 0 && (types & (1u << static_cast<uint32_t>(ev.type))) == 0) return false;
  if (request_id != 0 && ev.request.id != request_id) return false;
  if (!team.empty() && ev.request.spec.team != team) return false;
  if (!pool.empty() && ev.request.spec.pool != pool) return false;
  if (!node.empty()) {
    // e.nodes holds "cluster/node" keys; compared in place, without building
    // one per event.
    return std::any_of(e.nodes.begin(), e.nodes.end(), [&](absl::string_view key) {
      return key.size() == cluster.size() + 1 + node.size() && absl::StartsWith(key, cluster) &&
             key[cluster.size()] == '/' && absl::EndsWith(key, node);
    });
  }
  if (!cluster.empty()) {
    return std::find(e.clusters.begin(), e.clusters.end(), cluster) != e.clusters.end();
  }
  return true;
}

WatchHub::WatchHub(const WatchOptions& options, const NodeDirectory* nodes, Clock* clock)
    : options_(options), nodes_(nodes), clock_(clock) {}

WatchHub::~WatchHub() { Stop(); }

void WatchHub::Start(store::Store* store) {
  store_ = store;
  {
    absl::MutexLock lock(&mu_);
    last_bookmarks_ = clock_->TimeNow();
  }
  fan_out_ = StartNamedThread("arb-watch-fan", [this] { RunFanOut(); });
  catch_up_ = StartNamedThread("arb-watch-catch", [this] { RunCatchUp(); });
}

void WatchHub::Stop() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) EndAllLocked(absl::UnavailableError("the server is stopping; resume elsewhere"));
    stopped_ = true;
    serving_ = absl::UnavailableError("the server is stopping");
  }
  if (fan_out_.joinable()) fan_out_.join();
  if (catch_up_.joinable()) catch_up_.join();
}

void WatchHub::Publish(CommittedBatch batch) {
  absl::MutexLock lock(&queue_mu_);
  published_ = std::max(published_, batch.revision);
  queue_.push_back(std::move(batch));
}

bool WatchHub::Committed(int64_t revision) {
  {
    absl::MutexLock queue_lock(&queue_mu_);
    absl::MutexLock lock(&mu_);
    if (revision <= std::max(published_, head_)) return true;
  }
  // Committed, perhaps, and not yet handed to the hub: the ledger says.
  if (store_ == nullptr) return false;
  store::LedgerFilter filter;
  filter.after_seq = revision - 1;
  filter.limit = 1;
  absl::StatusOr<std::vector<ledger::Entry>> entries = store_->ListLedger(filter);
  return entries.ok() && !entries->empty() && entries->front().seq == revision;
}

void WatchHub::Reset(int64_t head, absl::Status serving) {
  absl::MutexLock lock(&mu_);
  ApplyReset(head, serving);
}

absl::StatusOr<int64_t> WatchHub::Subscribe(const std::string& caller, const WatchFilter& filter,
                                            int64_t start_revision, WatchSubscriber* subscriber) {
  if (start_revision < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_revision: must be >= 0, got ", start_revision));
  }
  if (!filter.node.empty() && filter.cluster.empty()) {
    return absl::InvalidArgumentError("node: requires cluster");
  }
  if (start_revision > 0 && !Committed(start_revision)) {
    return absl::OutOfRangeError(absl::StrCat(
        "start_revision: ", start_revision,
        " is ahead of the last committed revision; watch from a revision a list or an event "
        "returned"));
  }
  absl::MutexLock lock(&mu_);
  if (!serving_.ok()) return serving_;
  if (static_cast<int64_t>(subs_.size()) >= options_.max_streams) {
    stats_.refused++;
    return absl::ResourceExhaustedError(absl::StrCat("watch: this server has ", subs_.size(),
                                                     " streams open, its limit; retry later"));
  }
  int64_t& mine = per_caller_[caller];
  if (mine >= options_.max_streams_per_caller) {
    stats_.refused++;
    return absl::ResourceExhaustedError(
        absl::StrCat("watch: caller has ", mine, " streams open, the limit per caller"));
  }
  if (start_revision > 0 && start_revision < head_ - options_.replay_limit) {
    return absl::OutOfRangeError(absl::StrCat(
        "start_revision: ", start_revision, " is older than the oldest revision replayed (",
        head_ - options_.replay_limit, "); list again and watch from the list's revision"));
  }
  const int64_t id = next_id_++;
  Subscription& sub = subs_[id];
  sub.subscriber = subscriber;
  sub.filter = filter;
  sub.caller = caller;
  sub.after = start_revision == 0 ? head_ : start_revision;
  sub.last_sent = clock_->TimeNow() - FirstBookmarkLead(id, options_.bookmark_every);
  ++mine;
  if (sub.after >= head_) {
    sub.live = true;
    IndexLocked(id, filter, true);
  } else {
    catching_up_.push_back(id);
  }
  return id;
}

void WatchHub::Unsubscribe(int64_t id) {
  absl::MutexLock lock(&mu_);
  RemoveLocked(id);
}

WatchStats WatchHub::stats() const {
  absl::MutexLock lock(&mu_);
  WatchStats s = stats_;
  s.streams = static_cast<int64_t>(subs_.size());
  s.catching_up = 0;
  for (const auto& [id, sub] : subs_) s.catching_up += sub.live ? 0 : 1;
  s.queued_bytes = queued_bytes_.load();
  s.cutoffs = cutoffs_.load();
  s.head = head_;
  s.window_start = window_start_;
  return s;
}

void WatchHub::RunFanOut() {
  // Bookmarks are due per stream every `bookmark_every`; checking four
  // times as often keeps an idle stream's wait within 1.25 of it.
  const absl::Duration tick =
      std::clamp(options_.bookmark_every / 4, absl::Milliseconds(10), absl::Seconds(1));
  for (;;) {
    std::deque<CommittedBatch> items;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.AwaitWithTimeout(absl::Condition(
                                     +[](WatchHub* h) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                       return h->stopping_ || !h->queue_.empty();
                                     },
                                     this),
                                 tick);
      if (stopping_) return;
      items.swap(queue_);
    }
    for (CommittedBatch& batch : items) {
      // Encoding happens here, once per event, outside every lock.
      std::vector<WatchEventPtr> events = Prepare(std::move(batch.events));
      absl::MutexLock lock(&mu_);
      ApplyBatch(batch, std::move(events));
    }
    absl::MutexLock lock(&mu_);
    if (clock_->TimeNow() - last_bookmarks_ >= tick) SendBookmarks();
  }
}

WatchEventPtr WatchHub::PrepareOne(AllocationEvent event) const {
  auto e = std::make_shared<WatchEvent>();
  e->event = std::move(event);
  for (const core::Placement& p : e->event.request.placements) {
    auto [cluster, node] = nodes_->Get(p.node_id);
    std::string key = absl::StrCat(cluster, "/", node);
    if (std::find(e->nodes.begin(), e->nodes.end(), key) == e->nodes.end()) {
      e->nodes.push_back(std::move(key));
    }
    if (std::find(e->clusters.begin(), e->clusters.end(), cluster) == e->clusters.end()) {
      e->clusters.push_back(std::move(cluster));
    }
  }
  if (options_.encode) e->encoded = options_.encode(e->event, *nodes_);
  return e;
}

std::vector<WatchEventPtr> WatchHub::Prepare(std::vector<AllocationEvent> events) const {
  std::vector<WatchEventPtr> out;
  out.reserve(events.size());
  for (AllocationEvent& ev : events) out.push_back(PrepareOne(std::move(ev)));
  return out;
}

void WatchHub::ApplyBatch(const CommittedBatch& batch, std::vector<WatchEventPtr> events) {
  // Covered by a reset since; a batch of explanations only (no change, so
  // no revision of its own) is at the head.
  const bool explanations_only = batch.from_revision == batch.revision;
  if (stopped_ || batch.revision < head_ || (batch.revision == head_ && !explanations_only)) return;
  if (batch.from_revision != head_) {
    // Revisions the hub never saw (a commit whose outcome was unknown):
    // streams resume, and read them from the store.
    EndAllLocked(Resume(head_, "watch: the server missed revisions"));
    window_.clear();
    window_start_ = batch.from_revision;
  }
  head_ = batch.revision;
  stats_.events += static_cast<int64_t>(events.size());
  for (const WatchEventPtr& e : events) {
    if (!e->event.explanation) window_.push_back(e);
  }
  while (window_.size() > options_.window_events) {
    window_start_ = window_.front()->event.revision;
    window_.pop_front();
  }
  if (events.empty()) return;  // A commit of no request (a quota, a node, ...).
  const absl::Time now = clock_->TimeNow();
  auto deliver = [&](Subscription& sub, const WatchBatchPtr& matched) {
    stats_.deliveries += static_cast<int64_t>(matched->events.size());
    sub.last_sent = now;
    sub.subscriber->Deliver(matched);
  };
  // Unfiltered streams that have seen none of the batch get all of it: one
  // shared batch, whatever its size. The others are offered event by event.
  WatchBatchPtr all;
  std::vector<int64_t> offered_unfiltered;
  for (int64_t id : unfiltered_) {
    Subscription& sub = subs_.at(id);
    if (sub.filter.types != 0 || sub.after > batch.from_revision) {
      offered_unfiltered.push_back(id);
      continue;
    }
    if (all == nullptr) all = MakeWatchBatch(events);
    deliver(sub, all);
  }
  // Each other stream gets the batch's matching events in one call.
  absl::flat_hash_map<int64_t, std::vector<WatchEventPtr>> out;
  for (const WatchEventPtr& e : events) {
    auto offer = [&](int64_t id) {
      const Subscription& sub = subs_.at(id);
      // An explanation follows the change of its revision.
      const bool seen =
          e->event.explanation ? e->event.revision < sub.after : e->event.revision <= sub.after;
      if (seen || !sub.filter.Matches(*e)) return;
      out[id].push_back(e);
    };
    Visit(Find(by_request_, e->event.request.id), offer);
    for (const std::string& node : e->nodes) Visit(Find(by_node_, node), offer);
    for (const std::string& cluster : e->clusters) Visit(Find(by_cluster_, cluster), offer);
    Visit(Find(by_team_, e->event.request.spec.team), offer);
    Visit(Find(by_pool_, e->event.request.spec.pool), offer);
    for (int64_t id : offered_unfiltered) offer(id);
  }
  for (auto& [id, matched] : out) deliver(subs_.at(id), MakeWatchBatch(std::move(matched)));
}

void WatchHub::ApplyReset(int64_t head, const absl::Status& serving) {
  if (stopped_) return;
  serving_ = serving;
  const bool moved = head >= 0 && head != head_;
  if (!serving.ok()) {
    EndAllLocked(serving);
  } else if (moved) {
    EndAllLocked(Resume(head_, "watch: the leader reloaded its state"));
  }
  if (moved) {
    window_.clear();
    head_ = head;
    window_start_ = head;
  }
}

void WatchHub::SendBookmarks() {
  const absl::Time now = clock_->TimeNow();
  last_bookmarks_ = now;
  for (auto& [id, sub] : subs_) {
    if (!sub.live || now - sub.last_sent < options_.bookmark_every) continue;
    sub.last_sent = now;
    stats_.bookmarks++;
    sub.subscriber->Bookmark(std::max(head_, sub.after));
  }
}

void WatchHub::EndAllLocked(const absl::Status& status) {
  absl::flat_hash_map<int64_t, Subscription> subs;
  subs.swap(subs_);
  by_request_.clear();
  by_node_.clear();
  by_cluster_.clear();
  by_team_.clear();
  by_pool_.clear();
  unfiltered_.clear();
  per_caller_.clear();
  catching_up_.clear();
  for (auto& [id, sub] : subs) sub.subscriber->End(status);
}

void WatchHub::RemoveLocked(int64_t id) {
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  if (it->second.live) IndexLocked(id, it->second.filter, false);
  auto caller = per_caller_.find(it->second.caller);
  if (caller != per_caller_.end() && --caller->second <= 0) per_caller_.erase(caller);
  subs_.erase(it);
}

void WatchHub::IndexLocked(int64_t id, const WatchFilter& f, bool add) {
  auto apply = [&](auto& map, const auto& key) {
    if (add) {
      map[key].insert(id);
      return;
    }
    auto it = map.find(key);
    if (it == map.end()) return;
    it->second.erase(id);
    if (it->second.empty()) map.erase(it);
  };
  if (f.request_id != 0) {
    apply(by_request_, f.request_id);
  } else if (!f.node.empty()) {
    apply(by_node_, absl::StrCat(f.cluster, "/", f.node));
  } else if (!f.cluster.empty()) {
    apply(by_cluster_, f.cluster);
  } else if (!f.team.empty()) {
    apply(by_team_, f.team);
  } else if (!f.pool.empty()) {
    apply(by_pool_, f.pool);
  } else if (add) {
    unfiltered_.insert(id);
  } else {
    unfiltered_.erase(id);
  }
}

void WatchHub::RunCatchUp() {
  size_t idle_steps = 0;
  for (;;) {
    int64_t id = 0;
    {
      absl::MutexLock lock(&mu_);
      if (idle_steps > 0 && idle_steps >= catching_up_.size()) {
        // Every stream waiting has a backlog: let them drain.
        mu_.AwaitWithTimeout(absl::Condition(&stopped_), absl::Milliseconds(5));
        idle_steps = 0;
      }
      mu_.Await(absl::Condition(
          +[](WatchHub* h)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return h->stopped_ || !h->catching_up_.empty(); },
          this));
      if (stopped_) return;
      id = catching_up_.front();
      catching_up_.pop_front();
    }
    const bool more = CatchUpStep(id);
    absl::MutexLock lock(&mu_);
    if (!more) {
      idle_steps = 0;
      continue;
    }
    catching_up_.push_back(id);
    auto it = subs_.find(id);
    const bool waiting = it != subs_.end() && it->second.subscriber->Backlog() >= kCatchUpBacklog;
    idle_steps = waiting ? idle_steps + 1 : 0;
  }
}

bool WatchHub::CatchUpStep(int64_t id) {
  int64_t pos = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = subs_.find(id);
    if (it == subs_.end() || it->second.live) return false;
    Subscription& sub = it->second;
    if (sub.subscriber->Backlog() >= kCatchUpBacklog) return true;
    pos = sub.after;
    if (pos >= window_start_) {
      // The rest is in memory: replay it, a slice at a time, then follow.
      auto first =
          std::upper_bound(window_.begin(), window_.end(), pos,
                           [](int64_t r, const WatchEventPtr& e) { return r < e->event.revision; });
      std::vector<WatchEventPtr> matched;
      size_t scanned = 0;
      for (; first != window_.end() && scanned < kWindowScan; ++first, ++scanned) {
        sub.after = (*first)->event.revision;
        if (sub.filter.Matches(**first)) matched.push_back(*first);
      }
      if (!matched.empty()) {
        stats_.deliveries += static_cast<int64_t>(matched.size());
        sub.last_sent = clock_->TimeNow();
        sub.subscriber->Deliver(MakeWatchBatch(std::move(matched)));
      }
      if (first != window_.end()) return true;
      sub.after = std::max(sub.after, head_);
      sub.live = true;
      IndexLocked(id, sub.filter, true);
      return false;
    }
  }
  // Older than the window: one page from the store, without the lock.
  int64_t last = pos;
  absl::StatusOr<std::vector<WatchEventPtr>> stored = ReadStored(pos, &last);
  absl::MutexLock lock(&mu_);
  auto it = subs_.find(id);
  if (it == subs_.end()) return false;
  Subscription& sub = it->second;
  if (!stored.ok() || (last == pos && pos < window_start_)) {
    sub.subscriber->End(Resume(pos, stored.ok() ? "watch: the stored events end early"
                                                : "watch: the stored events cannot be read"));
    RemoveLocked(id);
    return false;
  }
  std::vector<WatchEventPtr> matched;
  for (const WatchEventPtr& e : *stored) {
    if (sub.filter.Matches(*e)) matched.push_back(e);
  }
  sub.after = last;
  if (!matched.empty()) {
    stats_.deliveries += static_cast<int64_t>(matched.size());
    sub.last_sent = clock_->TimeNow();
    sub.subscriber->Deliver(MakeWatchBatch(std::move(matched)));
  }
  return true;
}

absl::StatusOr<std::vector<WatchEventPtr>> WatchHub::ReadStored(int64_t after,
                                                                int64_t* last) const {
  store::LedgerFilter filter;
  filter.after_seq = after;
  filter.limit = kStorePage;
  ARBITER_ASSIGN_OR_RETURN(std::vector<ledger::Entry> entries, store_->ListLedger(filter));
  std::vector<WatchEventPtr> out;
  absl::flat_hash_map<int64_t, core::CapacityRequest> requests;
  for (const ledger::Entry& entry : entries) {
    *last = entry.seq;
    if (!absl::StartsWith(entry.action, "request.")) continue;
    const core::RequestState state =
        core::RequestStateFromName(absl::string_view(entry.action).substr(8));
    absl::string_view subject = entry.subject;
    int64_t request_id = 0;
    if (state == core::RequestState::kUnspecified || !absl::ConsumePrefix(&subject, "request/") ||
        !absl::SimpleAtoi(subject, &request_id)) {
      continue;
    }
    auto found = requests.find(request_id);
    if (found == requests.end()) {
      ARBITER_ASSIGN_OR_RETURN(core::CapacityRequest request, store_->GetRequest(request_id));
      found = requests.emplace(request_id, std::move(request)).first;
    }
    AllocationEvent ev;
    ev.type = EventTypeOfState(state);
    absl::StatusOr<core::CapacityRequest> as_of = ledger::RequestAsOf(found->second, entry);
    if (as_of.ok()) {
      ev.request = *std::move(as_of);
    } else {
      ev.request = found->second;
      ev.request.state = state;
    }
    ev.committed_at = entry.at;
    ev.revision = entry.seq;
    out.push_back(PrepareOne(std::move(ev)));
  }
  return out;
}

}  // namespace arbiter::app
