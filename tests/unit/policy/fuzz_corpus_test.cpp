// Drives the fuzz entry point (tests/fuzz/policy_parsers_fuzz.cpp) with a seed
// corpus and a bounded number of deterministic mutations, so the parsers' round-trip
// invariants run in every CI build even without clang/libFuzzer.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run(const std::string& s) { return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

const std::vector<std::string> kSeeds = {"203.0.113.5:1080",
                                         "[2001:db8::1]:443",
                                         "socks.example.com:1080",
                                         "localhost:1",
                                         "10.0.0.0/8",
                                         "2001:db8::/32",
                                         "0.0.0.0/0",
                                         "::/0",
                                         "::ffff:10.0.0.1",
                                         "64:ff9b::808:808",
                                         "[::ffff:1.2.3.4]:65535",
                                         "[fe80::1%eth0]:80",
                                         "a.b-c.d:8080",
                                         "1.2.3.4",
                                         "255.255.255.255/32",
                                         "[::]:1",
                                         "x:0",
                                         "[1:2:3:4:5:6:7:8]:9",
                                         "2002::/16",
                                         "192.168.1.128/25",
                                         "::1",
                                         "127.0.0.1:53"};

}  // namespace

TEST_CASE("fuzz corpus: seeds and mutations keep the parsers' round-trip invariants") {
  for (const auto& s : kSeeds) CHECK(run(s) == 0);
  std::mt19937 rng(20261202);  // fixed seed: failures reproduce
  static const char kAlphabet[] = "0123456789abcdefABCDEF.:[]/%-_ +xz\0\xff";
  const std::string alphabet(kAlphabet, sizeof kAlphabet - 1);  // keeps the NUL
  for (int i = 0; i < 20000; ++i) {                             // bounded: about a second under ASan
    std::string s = kSeeds[rng() % kSeeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: s.insert(pos, 1, c); break;
        case 1:
          if (pos < s.size()) s.erase(pos, 1);
          break;
        default:
          if (pos < s.size()) s[pos] = c;
          break;
      }
    }
    REQUIRE(run(s) == 0);
  }
}
