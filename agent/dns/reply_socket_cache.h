#pragma once
// "Answers go back to the guest from the address and port it asked (transparent reply
// sockets, cached and bounded), so stub resolvers that check the source accept them."
#include <functional>
#include <list>
#include <unordered_map>

#include "agent/common/unique_fd.h"
#include "agent/dns/socket_address.h"

namespace kib::dns {

// Reply sockets by the address the guest asked, least recently used evicted first.
// The opener makes one inside the workspace's namespace (in the agent:
// netns::open_transparent_reply_socket, bound to `asked` with IP_TRANSPARENT).
// The sockets are only used for immediate non-blocking sends, never with an operation
// in flight, so eviction may close them at any time.
class ReplySocketCache {
 public:
  using Opener = std::function<Result<UniqueFd>(const SocketAddress&)>;
  ReplySocketCache(size_t capacity, Opener opener);

  // The socket for `asked`, opened on first use. The fd stays valid until the next
  // call (which may evict it).
  Result<int> get(const SocketAddress& asked);
  size_t size() const { return by_address_.size(); }

 private:
  struct Entry {
    SocketAddress asked;
    UniqueFd fd;
  };
  size_t capacity_;
  Opener opener_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<SocketAddress, std::list<Entry>::iterator, SocketAddressHash> by_address_;
};

}  // namespace kib::dns
