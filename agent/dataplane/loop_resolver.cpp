#include "agent/dataplane/loop_resolver.h"

#include <poll.h>

#include <cerrno>

namespace kib::dataplane {

// One watched c-ares socket (c-ares owns the fd). Freed only after its poll's CQE: a
// watch c-ares has dropped is closed (its poll cancelled) and frees itself on release.
class LoopResolver::Watch final : private uring::OpOwner {
 public:
  Watch(LoopResolver& r, int fd) : uring::OpOwner(r.loop_), r_(&r), in_flight_(r.polls_in_flight_), fd_(fd) {}
  void set(bool read, bool write) {
    read_ = read;
    write_ = write;
    if (in_flight(kPoll))
      cancel_op(kPoll);  // re-armed with the new mask on its CQE
    else
      arm();
  }
  // The resolver may be gone before the CQE. Deletes this (now or on release).
  void orphan() {
    r_ = nullptr;
    close_ops();
  }
  void arm() {
    unsigned mask = (read_ ? POLLIN : 0) | (write_ ? POLLOUT : 0);
    if (mask == 0) return;
    io_uring_sqe* s = start_op(kPoll);
    io_uring_prep_poll_add(s, fd_, mask);
    ++*in_flight_;
  }
  int fd() const { return fd_; }

 private:
  enum Tag : unsigned { kPoll = 0 };
  void on_complete(unsigned, int32_t res, uint32_t) override {
    --*in_flight_;
    if (r_ != nullptr) r_->on_ready(*this, res);
  }
  void on_released() override { delete this; }

  LoopResolver* r_;
  std::shared_ptr<size_t> in_flight_;
  int fd_;
  bool read_ = false;
  bool write_ = false;
};

Result<std::unique_ptr<LoopResolver>> LoopResolver::create(uring::Loop& loop, const policy::ResolverOptions& options) {
  std::unique_ptr<LoopResolver> r(new LoopResolver(loop));
  LoopResolver* raw = r.get();
  auto a = policy::AsyncResolver::create(options,
                                         [raw](const policy::AsyncResolver::SocketInterest& s) { raw->on_socket(s); });
  if (!a.ok()) return std::move(a).error();
  r->ares_ = std::move(a.value());
  return r;
}

LoopResolver::~LoopResolver() {
  ares_.reset();  // may still call on_socket (closing sockets)
  for (auto& [fd, w] : watches_) w->orphan();
  watches_.clear();
}

void LoopResolver::resolve(const std::string& host, policy::AsyncResolver::Callback cb) {
  ares_->resolve(host, std::move(cb));
  rearm_timer();
}

void LoopResolver::on_socket(const policy::AsyncResolver::SocketInterest& s) {
  auto it = watches_.find(s.fd);
  if (!s.read && !s.write) {
    if (it != watches_.end()) {
      it->second->orphan();
      watches_.erase(it);
    }
    return;
  }
  if (it == watches_.end()) it = watches_.emplace(s.fd, new Watch(*this, s.fd)).first;
  it->second->set(s.read, s.write);
}

void LoopResolver::on_ready(Watch& w, int32_t res) {
  if (res > 0 || res == -ECANCELED) {
    int rfd = (res > 0 && (res & (POLLIN | POLLERR | POLLHUP))) ? w.fd() : -1;
    int wfd = (res > 0 && (res & (POLLOUT | POLLERR | POLLHUP))) ? w.fd() : -1;
    // Re-arm before processing: processing may close the socket (orphaning w).
    w.arm();
    if (rfd >= 0 || wfd >= 0) ares_->process_fd(rfd, wfd);
  }
  rearm_timer();
}

void LoopResolver::rearm_timer() {
  auto t = ares_->next_timeout();
  if (!t) return timer_.cancel();
  loop_.timers().arm(timer_, loop_.now_ms() + static_cast<uint64_t>(t->count()) + 1);
}

void LoopResolver::on_timer(uring::Timer&) {
  ares_->process_timeouts();
  rearm_timer();
}

}  // namespace kib::dataplane
