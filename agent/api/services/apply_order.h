#pragma once
// The order in which committed writes reach the runtime. A write takes a ticket while
// it holds the commit order (CommandRunner's order_mu_), so tickets are numbered in
// store order, and runs its committed callback once every earlier ticket it conflicts
// with has finished. Two writes conflict when they name the same key (a Workspace ID)
// or when either names none (a barrier: Egress writes, the start-up publish, the
// retries). So the runtime hears of each Workspace's changes in store order, and of
// every Egress change before or after all of them, while writes of different
// Workspaces apply at once: at 2,000 Workspaces a policy update of all is mostly
// nftables writes in different namespaces, which the kernel runs in parallel.
#include <condition_variable>
#include <list>
#include <mutex>
#include <string>
#include <utility>

namespace kib::api {

class ApplyOrder {
 public:
  class Ticket {
   public:
    Ticket(Ticket&& o) noexcept : order_(std::exchange(o.order_, nullptr)), it_(o.it_) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() { finish(); }
    // Blocks until every earlier conflicting ticket has finished.
    void wait();
    // Lets later tickets that wait on this one go (also done by the destructor).
    void finish();

   private:
    friend class ApplyOrder;
    struct Entry {
      std::string key;  // empty: a barrier
    };
    Ticket(ApplyOrder* order, std::list<Entry>::iterator it) : order_(order), it_(it) {}
    ApplyOrder* order_;
    std::list<Entry>::iterator it_;
  };

  // Takes the next ticket for what the callback touches (empty: everything, a
  // barrier): call with the commit order held.
  Ticket take(std::string key);
  // Tickets taken and not yet finished (tests).
  size_t pending() const;

 private:
  bool runnable(std::list<Ticket::Entry>::iterator it) const;  // under mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<Ticket::Entry> pending_;  // in ticket order
};

}  // namespace kib::api
