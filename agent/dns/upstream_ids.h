#pragma once
// The DNS IDs in flight on one upstream channel (a UDP socket, an association, a TCP
// connection). Every query gets an ID unique on its channel, chosen at random so an
// off-path sender cannot guess it, whatever ID the guest used: two guests may both
// ask with ID 1, and their answers must not be confused.
#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>

namespace kib::dns {

class UpstreamIds {
 public:
  UpstreamIds();
  // A fresh ID bound to query, or nullopt when all 65536 are taken.
  std::optional<uint16_t> allocate(uint64_t query);
  // The query an ID belongs to, if it is in flight.
  std::optional<uint64_t> find(uint16_t id) const;
  void release(uint16_t id);
  size_t size() const { return by_id_.size(); }

 private:
  std::unordered_map<uint16_t, uint64_t> by_id_;
  std::mt19937 rng_;
};

}  // namespace kib::dns
