#include "server/caller.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include "server/tls.h"

namespace arbiter::server {
namespace {

// The OU values of an RFC 2253 subject such as "CN=alice,OU=ml,O=Arbiter".
std::vector<std::string> OrganizationalUnits(absl::string_view subject) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(subject, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, "OU=") && !part.empty()) out.emplace_back(part);
  }
  return out;
}

}  // namespace

app::Caller CallerOf(const grpc::ServerContextBase& ctx, bool insecure) {
  app::Caller caller;
  caller.insecure = insecure;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return caller;
  caller.principal = PrincipalOf(*auth);
  if (caller.principal.empty()) return caller;
  for (const grpc::string_ref& s : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    for (std::string& ou : OrganizationalUnits(absl::string_view(s.data(), s.size()))) {
      caller.groups.push_back(std::move(ou));
    }
  }
  return caller;
}

}  // namespace arbiter::server
