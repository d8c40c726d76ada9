// Runs one fuzz target without libFuzzer, as a unit test of every build: each file of
// its seed corpus, then a bounded number of deterministic mutations of them (bit
// flips, byte changes, inserts, cuts, repeats, splices between seeds). A broken
// invariant aborts, naming itself; the input that broke it is written to
// ./fuzz-replay-crash on the way out, to be replayed: `<target> fuzz-replay-crash`.
// Usage: <target> [--mutations N] [--seed S] FILE_OR_DIR...
// The -Dfuzz=true build links libFuzzer's own main instead (tests/fuzz/run.sh).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
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

namespace {

using Input = std::vector<uint8_t>;

const Input* current = nullptr;  // the input being run, for the abort handler

// On abort (a broken invariant, or a sanitizer with abort_on_error): keep the input.
void keep_current(int sig) {
  if (current != nullptr) {
    const int fd = ::open("fuzz-replay-crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] ssize_t n = ::write(fd, current->data(), current->size());
      ::close(fd);
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void read_into(const std::filesystem::path& p, std::vector<Input>& out) {
  if (std::filesystem::is_directory(p)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(p))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());  // the same order everywhere: runs reproduce
    for (const auto& f : files) read_into(f, out);
    return;
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    std::exit(2);
  }
  out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Input mutate(const std::vector<Input>& seeds, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  Input s = seeds[pick(seeds.size())];
  for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
    const size_t at = pick(s.size() + 1);
    switch (rng() % 7) {
      case 0:
        if (at < s.size()) s[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (at < s.size()) s[at] = static_cast<uint8_t>(rng());
        break;
      case 2: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng())); break;
      case 3:
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(at),
                s.begin() + static_cast<std::ptrdiff_t>(std::min(s.size(), at + 1 + pick(16))));
        break;
      case 4: s.resize(at); break;
      case 5: {  // repeat a piece of itself
        const size_t from = pick(s.size()), len = std::min(s.size() - from, 1 + pick(32));
        Input piece(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(from + len));
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), piece.begin(), piece.end());
        break;
      }
      default: {  // splice: another seed's tail from here on
        const Input& other = seeds[pick(seeds.size())];
        const size_t from = pick(other.size() + 1);
        s.resize(at);
        s.insert(s.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 0;
  unsigned seed = 20261206;
  std::vector<Input> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutations") == 0 && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else {
      read_into(argv[i], seeds);
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations N] [--seed S] FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  std::signal(SIGABRT, keep_current);
  std::signal(SIGSEGV, keep_current);
  for (const auto& s : seeds) {
    current = &s;
    LLVMFuzzerTestOneInput(s.data(), s.size());
  }
  std::mt19937 rng(seed);
  for (long i = 0; i < mutations; ++i) {
    const Input s = mutate(seeds, rng);
    current = &s;
    LLVMFuzzerTestOneInput(s.data(), s.size());
  }
  current = nullptr;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  std::printf("%zu seeds and %ld mutations ran in %lld ms: every invariant held\n", seeds.size(), mutations,
              static_cast<long long>(ms.count()));
  return 0;
}
