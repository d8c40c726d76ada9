#include "agent/dns/reply_socket_cache.h"

namespace kib::dns {

ReplySocketCache::ReplySocketCache(size_t capacity, Opener opener)
    : capacity_(capacity == 0 ? 1 : capacity), opener_(std::move(opener)) {}

Result<int> ReplySocketCache::get(const SocketAddress& asked) {
  if (auto it = by_address_.find(asked); it != by_address_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->fd.get();
  }
  KIB_TRY_ASSIGN(auto fd, opener_(asked));
  if (by_address_.size() >= capacity_) {
    by_address_.erase(lru_.back().asked);
    lru_.pop_back();
  }
  lru_.push_front(Entry{asked, std::move(fd)});
  by_address_.emplace(asked, lru_.begin());
  return lru_.front().fd.get();
}

}  // namespace kib::dns
