// arbctl org import FILE: a whole organisation's teams and quotas, sent in
// chunks of ImportOrganisation calls; and arbctl models apply FILE: GPU
// models from a catalog file, one SetGpuModel each.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "clients/arbctl/commands.h"

namespace arbiter::arbctl {
namespace {

// Entries per ImportOrganisation call: well under the server's 50,000 and
// its 4 MiB message limit (a quota is about 60 bytes on the wire).
constexpr int kChunk = 20'000;

// Adds one call's counts to `total`.
void Add(const v1::ImportOrganisationResponse& r, v1::ImportOrganisationResponse* total) {
  total->set_teams_created(total->teams_created() + r.teams_created());
  total->set_teams_unchanged(total->teams_unchanged() + r.teams_unchanged());
  total->set_quotas_set(total->quotas_set() + r.quotas_set());
  total->set_quotas_unchanged(total->quotas_unchanged() + r.quotas_unchanged());
}

// The contents of `path`; false (and a message) when it cannot be read.
bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in.good()) {
    std::cerr << "arbctl: cannot read " << path << "\n";
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

}  // namespace

int Commands::ApplyCatalog(const std::string& path) {
  std::string text;
  if (!ReadFile(path, &text)) return 2;
  v1::ListGpuModelsResponse catalog;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text, &catalog);
  if (!parsed.ok()) {
    std::cerr << "arbctl: " << path << " is not a GPU catalog (JSON with \"gpu_models\", "
              << "as `arbctl -o json models list` prints): " << parsed.ToString() << "\n";
    return 2;
  }
  int set = 0;
  for (const v1::GpuModel& model : catalog.gpu_models()) {
    v1::SetGpuModelRequest req;
    *req.mutable_gpu_model() = model;
    v1::SetGpuModelResponse resp;
    if (!Call(inventory_, &v1::InventoryService::Stub::SetGpuModel, req, &resp)) {
      std::cerr << "arbctl: stopped at " << model.name() << " (" << set
                << " model(s) set before it)\n";
      return 1;
    }
    set += resp.changed() ? 1 : 0;
  }
  std::cout << "gpu models: " << set << " set, " << catalog.gpu_models_size() - set
            << " unchanged\n";
  return 0;
}

int Commands::ImportOrganisation(const std::string& path) {
  std::string text;
  if (!ReadFile(path, &text)) return 2;
  v1::ImportOrganisationRequest org;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text, &org);
  if (!parsed.ok()) {
    std::cerr << "arbctl: " << path << " is not an organisation (JSON with \"teams\" and "
              << "\"quotas\", docs/api.md ImportOrganisationRequest): " << parsed.ToString()
              << "\n";
    return 2;
  }
  // Teams first, in the file's order (a parent before its children), then
  // quotas; each call is all or nothing.
  v1::ImportOrganisationResponse total;
  const int teams = org.teams_size();
  const int entries = teams + org.quotas_size();
  for (int from = 0; from < entries; from += kChunk) {
    const int to = std::min(entries, from + kChunk);
    v1::ImportOrganisationRequest chunk;
    for (int i = from; i < to; ++i) {
      if (i < teams) {
        *chunk.add_teams() = org.teams(i);
      } else {
        *chunk.add_quotas() = org.quotas(i - teams);
      }
    }
    v1::ImportOrganisationResponse resp;
    if (!Call(governance_, &v1::GovernanceService::Stub::ImportOrganisation, chunk, &resp)) {
      std::cerr << "arbctl: the call carrying entries " << from << ".." << to - 1 << " of "
                << entries << " failed and wrote nothing (its teams[i] and quotas[i] count "
                << "from the start of that call); the calls before it were imported, and "
                << "importing the file again leaves them as they are\n";
      return 1;
    }
    Add(resp, &total);
  }
  if (options_.json) return PrintJsonMessage(total), 0;
  std::cout << "teams: " << total.teams_created() << " created, " << total.teams_unchanged()
            << " unchanged; quotas: " << total.quotas_set() << " set, " << total.quotas_unchanged()
            << " unchanged\n";
  return 0;
}

}  // namespace arbiter::arbctl
