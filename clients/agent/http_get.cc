#include "clients/agent/http_get.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <curl/curl.h>

namespace arbiter::agent {
namespace {

constexpr size_t kMaxBody = 64 << 20;

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
  void operator()(CURLU* url) const { curl_url_cleanup(url); }
};

// What the callbacks collect of one transfer.
struct Reply {
  std::string status_line;  // The last one: "HTTP/1.1 200 OK".
  std::string body;
  bool too_long = false;
};

size_t OnHeader(char* data, size_t size, size_t count, void* reply_ptr) {
  auto* reply = static_cast<Reply*>(reply_ptr);
  const absl::string_view line(data, size * count);
  if (absl::StartsWith(line, "HTTP/")) {
    reply->status_line = std::string(absl::StripTrailingAsciiWhitespace(line));
  }
  return size * count;
}

size_t OnBody(char* data, size_t size, size_t count, void* reply_ptr) {
  auto* reply = static_cast<Reply*>(reply_ptr);
  if (reply->body.size() + size * count > kMaxBody) {
    reply->too_long = true;
    return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR.
  }
  reply->body.append(data, size * count);
  return size * count;
}

}  // namespace

absl::StatusOr<HttpReply> HttpFetch(const std::string& url_text, absl::Duration timeout,
                                    const HttpOptions& options) {
  const bool https = options.allow_https && absl::StartsWith(url_text, "https://");
  if (!https && !absl::StartsWith(url_text, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.allow_https ? "not an http:// or https:// URL: " : "not an http:// URL: ",
        url_text));
  }
  std::unique_ptr<CURLU, CurlDeleter> url(curl_url());
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (url == nullptr || curl == nullptr) {
    return absl::ResourceExhaustedError("libcurl: out of memory");
  }
  if (CURLUcode rc = curl_url_set(url.get(), CURLUPART_URL, url_text.c_str(), 0); rc != CURLUE_OK) {
    return absl::InvalidArgumentError(absl::StrCat("URL ", url_text, ": ", curl_url_strerror(rc)));
  }

  Reply reply;
  char error[CURL_ERROR_SIZE] = "";
  // Whole milliseconds (libcurl takes a `long`), at least one where `timeout`
  // is positive: 0 means no limit, as a zero SO_RCVTIMEO did before.
  const long timeout_ms =
      timeout > absl::ZeroDuration()
          ? static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)))
          : 0;
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_CURLU, url.get());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, options.allow_https ? "http,https" : "http");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");     // Not even one named in the environment.
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // Timeouts without SIGALRM: thread-safe.
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(kMaxBody));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "arbiter-agent");
  if (!options.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!options.cert_file.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, options.cert_file.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, options.key_file.c_str());
  }
  if (!options.basic_user.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(c, CURLOPT_USERNAME, options.basic_user.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, options.basic_password.c_str());
  }
  curl_slist* headers =
      curl_slist_append(nullptr, absl::StrCat("Accept: ", options.accept).c_str());
  if (!options.bearer_token.empty()) {
    headers = curl_slist_append(
        headers, absl::StrCat("Authorization: Bearer ", options.bearer_token).c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &reply);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);

  const std::string why = error[0] != '\0' ? error : curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_OK:
      break;
    case CURLE_FILESIZE_EXCEEDED:
      return absl::ResourceExhaustedError(absl::StrCat("GET ", url_text, ": reply over 64 MiB"));
    case CURLE_WRITE_ERROR:
      if (reply.too_long) {
        return absl::ResourceExhaustedError(absl::StrCat("GET ", url_text, ": reply over 64 MiB"));
      }
      return absl::UnavailableError(absl::StrCat("GET ", url_text, ": ", why));
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return absl::InvalidArgumentError(absl::StrCat("URL ", url_text, ": ", why));
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
      return absl::InvalidArgumentError(absl::StrCat("GET ", url_text, ": ", why));
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(absl::StrCat("GET ", url_text, ": ", why));
    default:
      return absl::UnavailableError(absl::StrCat("GET ", url_text, ": ", why));
  }
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  HttpReply out;
  out.code = static_cast<int32_t>(code);
  out.status_line = std::move(reply.status_line);
  out.body = std::move(reply.body);
  return out;
}

absl::StatusOr<std::string> HttpGet(const std::string& url, absl::Duration timeout) {
  absl::StatusOr<HttpReply> reply = HttpFetch(url, timeout, HttpOptions());
  if (!reply.ok()) {
    // A scrape that timed out is one that could not be made.
    if (absl::IsDeadlineExceeded(reply.status())) {
      return absl::UnavailableError(reply.status().message());
    }
    return reply.status();
  }
  if (reply->code != 200) {
    return absl::FailedPreconditionError(absl::StrCat("GET ", url, ": ", reply->status_line));
  }
  return std::move(reply->body);
}

}  // namespace arbiter::agent
