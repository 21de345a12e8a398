// Schema migrations: the SQL files of migrations/, embedded in the binary at
// build time (cmake/EmbedMigrations.cmake), in version order.
#pragma once

#include <string>
#include <vector>

namespace arbiter::store {

struct Migration {
  int version = 0;
  std::string name;
  std::string sql;
};

// The migrations this binary was built with, ascending by version.
const std::vector<Migration>& EmbeddedMigrations();

}  // namespace arbiter::store
