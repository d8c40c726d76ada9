// Fuzz target: DNS over TCP framing (agent/dns/tcp_framing.cpp) as guests and
// resolvers send it: two-byte lengths that lie, zero-length frames, frames cut
// anywhere. The first byte picks the read size; the stream is fed in those pieces and
// again whole. Checked: both ways yield the same messages and the same verdict; each
// message is what its frame carried; what is held stays within one frame plus a read.
#include <vector>

#include "agent/dns/tcp_framing.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
namespace dns = kib::dns;

struct Outcome {
  std::vector<dns::Bytes> messages;
  bool corrupt = false;
};

Outcome run(dns::ByteView stream, size_t piece) {
  Outcome o;
  dns::FrameReassembler r;
  for (size_t at = 0; at < stream.size() && !o.corrupt; at += piece) {
    const size_t n = std::min(piece, stream.size() - at);
    r.feed(stream.subspan(at, n));
    for (;;) {
      auto m = r.next();
      if (!m.ok()) {
        o.corrupt = true;
        break;
      }
      if (!m->has_value()) break;
      require(!(*m)->empty(), "no message is empty");
      o.messages.push_back(std::move(**m));
    }
    require(o.corrupt || r.buffered() < 2 + 65535 + piece, "held bytes stay within a frame plus a read");
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kib::fuzz::FuzzInput in(data, size);
  const size_t piece = 1 + in.byte() % 64;
  const dns::ByteView stream = in.rest();
  const Outcome pieces = run(stream, piece);
  const Outcome whole = run(stream, stream.size() + 1);
  require(pieces.corrupt == whole.corrupt && pieces.messages == whole.messages,
          "reads of any size give the same messages");
  // Each message is the frame it came in: re-framing them rebuilds the stream's start.
  dns::Bytes again;
  for (const auto& m : whole.messages) require(dns::append_frame(again, m).ok(), "a message re-frames");
  require(again.size() <= stream.size() && std::equal(again.begin(), again.end(), stream.begin()),
          "the messages are the stream's frames, in order");
  return 0;
}
