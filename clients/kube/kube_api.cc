#include "clients/kube/kube_api.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <curl/curl.h>

namespace arbiter::kube {
namespace {

constexpr size_t kMaxBody = 256 << 20;  // A list of every pod of a large cluster.
constexpr size_t kMaxLine = 16 << 20;   // One watch event.
constexpr char kTokenFile[] = "/var/run/secrets/kubernetes.io/serviceaccount/token";
constexpr char kCaFile[] = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

bool ReadFile(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  out = std::string(absl::StripAsciiWhitespace(text.str()));
  return true;
}

// One transfer's state, shared with libcurl's callbacks.
struct Transfer {
  std::string body;
  bool too_long = false;
  // A watch: complete lines go to on_line; `pending` holds a partial one.
  const std::function<bool(const std::string&)>* on_line = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::string pending;
  bool ended_by_reader = false;
  long code = 0;
};

size_t OnBody(char* data, size_t size, size_t count, void* transfer_ptr) {
  auto* t = static_cast<Transfer*>(transfer_ptr);
  const size_t n = size * count;
  if (t->on_line == nullptr || t->code != 200) {
    if (t->body.size() + n > kMaxBody) {
      t->too_long = true;
      return 0;
    }
    t->body.append(data, n);
    return n;
  }
  t->pending.append(data, n);
  size_t start = 0;
  for (size_t nl = t->pending.find('\n'); nl != std::string::npos;
       nl = t->pending.find('\n', start)) {
    std::string line = t->pending.substr(start, nl - start);
    start = nl + 1;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (!(*t->on_line)(line)) {
      t->ended_by_reader = true;
      return 0;
    }
  }
  t->pending.erase(0, start);
  if (t->pending.size() > kMaxLine) {
    t->too_long = true;
    return 0;
  }
  return n;
}

int OnProgress(void* transfer_ptr, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(transfer_ptr);
  return t->stop != nullptr && t->stop->load() ? 1 : 0;  // Non-zero aborts the transfer.
}

size_t OnHeader(char* data, size_t size, size_t count, void* transfer_ptr) {
  auto* t = static_cast<Transfer*>(transfer_ptr);
  const absl::string_view line(data, size * count);
  if (absl::StartsWith(line, "HTTP/")) {
    // "HTTP/1.1 200 OK": the status follows the first space.
    const size_t space = line.find(' ');
    if (space != absl::string_view::npos)
      t->code = std::atol(std::string(line.substr(space + 1, 3)).c_str());
  }
  return size * count;
}

}  // namespace

absl::StatusOr<KubeApiOptions> KubeApiOptions::InCluster() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr) {
    return absl::FailedPreconditionError(
        "kube-api: not in a pod (KUBERNETES_SERVICE_HOST/PORT unset); give --kube-api");
  }
  KubeApiOptions options;
  const std::string h = host;
  options.server =
      absl::StrCat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":", port);
  options.token_file = kTokenFile;
  options.ca_file = kCaFile;
  return options;
}

KubeApi::KubeApi(KubeApiOptions options) : options_(std::move(options)) {}

namespace {

// What every request sets: the URL, headers (the token re-read), no proxy
// or redirects, the CA, and the callbacks into `transfer`.
absl::Status Prepare(const KubeApiOptions& options, CURL* c, const std::string& url,
                     const std::string& content_type,
                     std::unique_ptr<curl_slist, CurlDeleter>& headers, char* error,
                     Transfer& transfer) {
  auto add_header = [&headers](const std::string& h) {
    headers.reset(curl_slist_append(headers.release(), h.c_str()));
  };
  add_header("Accept: application/json");
  if (!content_type.empty()) add_header("Content-Type: " + content_type);
  if (!options.token_file.empty()) {
    std::string token;
    if (!ReadFile(options.token_file, token)) {
      return absl::FailedPreconditionError(
          absl::StrCat("kube-token-file: cannot read ", options.token_file));
    }
    add_header("Authorization: Bearer " + token);
  }
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");     // Not even one named in the environment.
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // Timeouts without SIGALRM: thread-safe.
  curl_easy_setopt(c, CURLOPT_USERAGENT, "arbiter-kube");
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  if (!options.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options.ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &transfer);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KubeReply> KubeApi::Call(const std::string& method, const std::string& path,
                                        const std::string& body,
                                        const std::string& content_type) const {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return absl::ResourceExhaustedError("libcurl: out of memory");
  CURL* c = curl.get();
  Transfer transfer;
  std::unique_ptr<curl_slist, CurlDeleter> headers;
  char error[CURL_ERROR_SIZE] = "";
  const std::string url = options_.server + path;
  if (absl::Status s =
          Prepare(options_, c, url, body.empty() ? "" : content_type, headers, error, transfer);
      !s.ok()) {
    return s;
  }
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.timeout)));
  const CURLcode rc = curl_easy_perform(c);
  if (transfer.too_long) {
    return absl::ResourceExhaustedError(absl::StrCat(method, " ", path, ": reply over 256 MiB"));
  }
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", url, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc)));
  }
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  return KubeReply{code, std::move(transfer.body)};
}

absl::Status KubeApi::Watch(const std::string& path,
                            const std::function<bool(const std::string&)>& on_line,
                            const std::atomic<bool>& stop) const {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return absl::ResourceExhaustedError("libcurl: out of memory");
  CURL* c = curl.get();
  Transfer transfer;
  transfer.on_line = &on_line;
  transfer.stop = &stop;
  std::unique_ptr<curl_slist, CurlDeleter> headers;
  char error[CURL_ERROR_SIZE] = "";
  const std::string url = options_.server + path;
  if (absl::Status s = Prepare(options_, c, url, "", headers, error, transfer); !s.ok()) return s;
  // The progress callback runs at least once a second while idle: it is
  // how `stop` ends a quiet stream.
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &transfer);
  // A stream that sends nothing for 5 minutes (not even a bookmark) is dead.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 300L);
  const CURLcode rc = curl_easy_perform(c);
  if (stop.load()) return absl::CancelledError("stopped");
  if (transfer.ended_by_reader) return absl::CancelledError("the reader ended the watch");
  if (transfer.code != 0 && transfer.code != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", path, ": HTTP ", transfer.code, ": ", transfer.body.substr(0, 512)));
  }
  if (transfer.too_long) return absl::ResourceExhaustedError("a watch event over 16 MiB");
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc)));
  }
  return absl::OkStatus();
}

std::string QueryEscape(const std::string& value) {
  std::string out;
  for (unsigned char ch : value) {
    if (absl::ascii_isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(ch, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace arbiter::kube
