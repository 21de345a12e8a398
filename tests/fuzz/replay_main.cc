// Replays a fuzz target's corpus without libFuzzer: each file named on the
// command line, or in a directory named there, is one input. Exits 0 when
// every input ran (a target aborts on a finding). Built with the project's
// compiler, so that `tests/run` replays the corpus on every machine.
//
// With --mutate-seconds=N, a target that has its own structure-aware
// mutator (LLVMFuzzerCustomMutator) is then fuzzed for N seconds more, from
// a fixed seed, without coverage guidance: each new input is a corpus input
// changed one to four times. Before it runs, each one is written to
// ./last-mutated-input, which a finding leaves behind to reproduce it.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                                                size_t max_size, unsigned int seed);

namespace {

constexpr size_t kMaxMutatedSize = 8192;

// Runs mutated corpus inputs for `seconds`; returns how many ran.
int Mutate(const std::vector<std::vector<char>>& corpus, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::mt19937 rng(20261123);
  int runs = 0;
  std::vector<uint8_t> input;
  while (std::chrono::steady_clock::now() < until) {
    input.clear();
    if (!corpus.empty()) {
      const std::vector<char>& from = corpus[rng() % corpus.size()];
      input.assign(from.begin(), from.end());
    }
    size_t size = input.size();
    input.resize(kMaxMutatedSize);
    for (unsigned n = 1 + rng() % 4; n > 0; --n) {
      size = LLVMFuzzerCustomMutator(input.data(), size, kMaxMutatedSize, rng());
    }
    {
      std::ofstream out("last-mutated-input", std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(size));
    }
    LLVMFuzzerTestOneInput(input.data(), size);
    ++runs;
  }
  std::remove("last-mutated-input");
  return runs;
}

}  // namespace

int main(int argc, char** argv) {
  int mutate_seconds = 0;
  std::vector<std::vector<char>> corpus;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mutate-seconds=", 17) == 0) {
      mutate_seconds = std::atoi(argv[i] + 17);
      continue;
    }
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(argv[i])) {
      for (const auto& entry : std::filesystem::directory_iterator(argv[i])) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.emplace_back(argv[i]);
    }
    for (const auto& file : files) {
      std::ifstream in(file, std::ios::binary);
      corpus.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(corpus.back().data()),
                             corpus.back().size());
    }
  }
  const int inputs = static_cast<int>(corpus.size());
  std::printf("replayed %d inputs\n", inputs);
  if (mutate_seconds > 0 && LLVMFuzzerCustomMutator != nullptr) {
    std::printf("ran %d mutated inputs in %d s\n", Mutate(corpus, mutate_seconds), mutate_seconds);
  }
  return inputs > 0 ? 0 : 1;
}
