#include "agent/dns/upstream_ids.h"

#include <sys/random.h>

namespace kib::dns {
namespace {

uint32_t random_seed() {
  uint32_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = std::random_device{}();
  return seed;
}

}  // namespace

UpstreamIds::UpstreamIds() : rng_(random_seed()) {}

std::optional<uint16_t> UpstreamIds::allocate(uint64_t query) {
  constexpr size_t kIdSpace = 65536;
  if (by_id_.size() >= kIdSpace) return std::nullopt;
  // Random probes find a free ID fast while the table is sparse; past half full, walk
  // from a random start so allocation stays bounded.
  uint16_t id = static_cast<uint16_t>(rng_());
  for (int probe = 0; probe < 16 && by_id_.count(id) != 0; ++probe) id = static_cast<uint16_t>(rng_());
  while (by_id_.count(id) != 0) id = static_cast<uint16_t>(id + 1);
  by_id_.emplace(id, query);
  return id;
}

std::optional<uint64_t> UpstreamIds::find(uint16_t id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

void UpstreamIds::release(uint16_t id) { by_id_.erase(id); }

}  // namespace kib::dns
