// netns-change-watch-tool: watches namespaces through netns::ChangeWatchSet, as the
// agent's repair does, for tests. Not installed.
//
//   netns-change-watch-tool NETNS_PATH...
//
// Prints "READY" once every watch is open (key = the path's index, from 0), then for
// each "poll" line on stdin "CHANGED k:what..." (the keys reported, in order, each
// with what it reported: nft, routing or nft+routing) or "QUIET". "poll-gen" is the
// same with the generation a nft report names ("0:nft@17", "0:nft@?" when unknown);
// "gen" prints the first namespace's nftables generation as read now ("GEN 17").
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "netns/attachment.h"
#include "netns/change_watch.h"
#include "netns/namespace_handle.h"
#include "netns/nft_generation.h"
#include "netns/nft_ruleset.h"

namespace {

void say(const std::string& line) { std::cout << line << std::endl; }  // flushed: read line by line

}  // namespace

int main(int argc, char** argv) {
  using namespace kib::netns;
  if (argc < 2) {
    std::cerr << "usage: netns-change-watch-tool NETNS_PATH...\n";
    return 2;
  }
  auto set = ChangeWatchSet::create();
  if (!set.ok()) {
    std::cerr << set.error().message << "\n";
    return 1;
  }
  std::vector<NamespaceHandle> held;  // the watches outlive nothing they need, but keep the namespaces open
  for (int i = 1; i < argc; ++i) {
    auto ns = NamespaceHandle::open(argv[i]);
    if (!ns.ok()) {
      std::cerr << ns.error().message << "\n";
      return 1;
    }
    auto w = ChangeWatch::open(ns->fd(), {kTableName, kDefaultRouteTable});
    if (!w.ok()) {
      std::cerr << w.error().message << "\n";
      return 1;
    }
    if (auto st = set->add(static_cast<uint64_t>(i - 1), std::move(w.value())); !st.ok()) {
      std::cerr << st.error().message << "\n";
      return 1;
    }
    held.push_back(std::move(ns.value()));
  }
  say("READY");
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "gen") {
      auto gen = nft_generation(held.front().fd());
      say(gen.ok() ? "GEN " + std::to_string(*gen) : "ERROR " + gen.error().message);
      continue;
    }
    if (line != "poll" && line != "poll-gen") {
      say("ERROR unknown command");
      continue;
    }
    auto reported = set->changed();
    if (!reported.ok()) {
      say("ERROR " + reported.error().message);
      continue;
    }
    if (reported->empty()) {
      say("QUIET");
      continue;
    }
    std::sort(reported->begin(), reported->end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string out = "CHANGED";
    for (const auto& [k, r] : *reported) {
      out += " " + std::to_string(k) + ":" + (r.nft && r.routing ? "nft+routing" : r.nft ? "nft" : "routing");
      if (line == "poll-gen" && r.nft) out += "@" + (r.nft_generation ? std::to_string(*r.nft_generation) : "?");
    }
    say(out);
  }
  return 0;
}
