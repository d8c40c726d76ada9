// Fuzz target: one Workspace's DNS queries in flight (agent/dns/query_mux.cpp) driven
// by a hostile guest and hostile resolvers at once. The input is a program: each step
// submits a guest query (UDP or one of three TCP connections), answers a dispatched
// query (the fuzzer's bytes under the upstream ID the mux chose, or with any ID),
// lets time pass, breaks a resolver channel or closes a guest connection. Checked
// beyond not crashing: every delivery goes to a query still waiting, with the guest's
// own ID, within its UDP size; the per-resolver ID spaces add up to what is in
// flight, never above the cap; and once time runs out every query still wanted got
// exactly one delivery (an answer or SERVFAIL).
#include <map>
#include <vector>

#include "agent/dns/query_mux.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
namespace dns = kib::dns;
using namespace std::chrono_literals;

struct Asked {
  uint16_t guest_id = 0;
  uint16_t udp_size = 0;
  uint64_t tcp = 0;
  bool delivered = false;
  bool forgotten = false;
};

class Model {
 public:
  explicit Model(size_t resolvers) : mux_(dns::QueryMuxOptions{resolvers, 2000ms, 8, 4096}), resolvers_(resolvers) {}

  void step(kib::fuzz::FuzzInput& in) {
    switch (in.byte() % 6) {
      case 0: submit(in.byte() % 4, in.sized()); break;
      case 1: answer_dispatched(in.byte(), in.byte(), in.sized()); break;
      case 2: take(mux_.answer(in.byte() % (resolvers_ + 1), in.sized(), now_)); break;
      case 3:
        now_ += std::chrono::milliseconds(in.byte() * 20);
        take(mux_.expire(now_));
        break;
      case 4: take(mux_.resolver_failed(in.byte() % resolvers_, now_)); break;
      default: forget(in.byte() % 4); break;
    }
    size_t sum = 0;
    for (size_t r = 0; r < resolvers_; ++r) sum += mux_.in_flight_on(r);
    require(sum == mux_.in_flight(), "the resolvers' ID spaces add up to the queries in flight");
    require(mux_.in_flight() <= mux_.max_in_flight(), "never above the in-flight cap");
  }

  // Time runs out: every query still wanted has had exactly one delivery.
  void finish() {
    for (size_t i = 0; i <= resolvers_ && mux_.in_flight() > 0; ++i) {
      now_ += 3s;
      take(mux_.expire(now_));
    }
    require(mux_.in_flight() == 0, "every query ends once its resolvers timed out");
    for (const auto& [port, a] : asked_) require(a.delivered || a.forgotten, "every query wanted is answered");
  }

 private:
  void submit(uint64_t tcp, dns::ByteView query) {
    const uint16_t port = ++next_port_;
    dns::GuestOrigin origin;
    origin.guest = dns::SocketAddress::from(*kib::policy::IpAddress::parse("10.0.0.2"), port);
    origin.tcp_connection = tcp;
    auto d = mux_.submit(origin, query, now_);
    if (!d.ok()) return;
    auto info = dns::inspect_query(query);
    require(info.ok(), "only well-formed queries are dispatched");
    require(d->resolver == 0 && d->message.size() == query.size(), "a query goes first to resolver 0, as it is");
    asked_[port] = Asked{info->header.id, info->udp_payload_size, tcp};
    dispatched_.push_back(std::move(*d));
  }

  void answer_dispatched(uint8_t which, uint8_t flags, dns::ByteView body) {
    if (dispatched_.empty()) return;
    const dns::Dispatch& d = dispatched_[which % dispatched_.size()];
    // The fuzzer's bytes as the answer, under the ID and question of the dispatch.
    dns::Bytes msg(d.message.begin(), d.message.end());
    msg.insert(msg.end(), body.begin(), body.end());
    msg[2] = static_cast<uint8_t>(0x80 | (flags & 0x7b));  // QR set, any opcode/AA/TC/RD
    msg[3] = static_cast<uint8_t>(flags & 0x8f);           // RA, RCODE
    take(mux_.answer(d.resolver, msg, now_));
  }

  void forget(uint64_t tcp) {
    if (tcp == 0) return;
    mux_.forget_connection(tcp);
    for (auto& [port, a] : asked_)
      if (a.tcp == tcp) a.forgotten = true;
  }

  void take(dns::MuxActions actions) {
    for (auto& d : actions.dispatches) {
      require(d.resolver > 0 && d.resolver < resolvers_, "a fail-over goes to a later resolver");
      dispatched_.push_back(std::move(d));
    }
    for (const auto& del : actions.deliveries) {
      auto it = asked_.find(del.origin.guest.port());
      require(it != asked_.end(), "a delivery goes to a guest that asked");
      Asked& a = it->second;
      require(!a.delivered && !a.forgotten, "one delivery per query, none after its connection closed");
      require(del.message.size() >= dns::kHeaderSize && dns::read_id(del.message) == a.guest_id,
              "a delivery carries the guest's own ID");
      if (a.tcp == 0) require(del.message.size() <= a.udp_size, "a UDP delivery fits the guest's UDP size");
      a.delivered = true;
    }
    if (dispatched_.size() > 256) dispatched_.erase(dispatched_.begin(), dispatched_.begin() + 128);
  }

  dns::QueryMux mux_;
  size_t resolvers_;
  dns::Clock::time_point now_{};
  uint16_t next_port_ = 0;
  std::map<uint16_t, Asked> asked_;
  std::vector<dns::Dispatch> dispatched_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kib::fuzz::FuzzInput in(data, size);
  Model m(1 + in.byte() % 3);
  for (int steps = 0; !in.empty() && steps < 200; ++steps) m.step(in);
  m.finish();
  return 0;
}
