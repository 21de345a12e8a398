// The store contract: one googletest suite that every implementation of
// store::Store passes (store/memory/ and store/postgres/). An implementation
// instantiates it with a factory of fresh, empty (migrated) stores:
//
//   INSTANTIATE_TEST_SUITE_P(Memory, StoreContractTest,
//                            ::testing::Values(StoreFactory{"memory", &MakeMemoryStore}));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#include "store/store.h"

namespace arbiter::store::contract {

// A store under test, with the controls the contract needs.
class StoreUnderTest {
 public:
  virtual ~StoreUnderTest() = default;
  virtual Store& store() = 0;
  // Makes `epoch` the current leader epoch (as a takeover does).
  [[nodiscard]] virtual absl::Status SetCurrentEpoch(int64_t epoch) = 0;
};

struct ContractOptions {
  std::string ledger_key_pem;  // Empty: no checkpoints.
  int64_t checkpoint_every = 1000;
};

// Makes a fresh, empty store. `name` is what test listings print for it.
struct StoreFactory {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<StoreUnderTest>>(const ContractOptions&)> make;
};
inline void PrintTo(const StoreFactory& factory, std::ostream* out) { *out << factory.name; }

class StoreContractTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override { Open(ContractOptions()); }
  // Replaces the store with a fresh one made with `options`.
  void Open(const ContractOptions& options);
  Store& store() { return under_test_->store(); }
  StoreUnderTest& under_test() { return *under_test_; }

 private:
  std::unique_ptr<StoreUnderTest> under_test_;
};

}  // namespace arbiter::store::contract
