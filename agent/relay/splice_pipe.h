#pragma once
// Moves the bytes of one direction of a plain relay socket -> pipe -> socket inside
// the kernel (splice(2)): no copy through user space. Used only once a flow proves
// to be bulk (a recv filled a whole buffer), so idle and chatty connections keep no
// pipe. Both sockets must be O_NONBLOCK: SPLICE_F_NONBLOCK covers only the pipe.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "agent/common/unique_fd.h"
#include "agent/relay/gather_wait.h"

namespace kib::relay {

class SplicePipe {
 public:
  enum class Step : uint8_t {
    src_empty,  // nothing more to read now: wait for src to be readable
    dst_full,   // bytes wait in the pipe: wait for dst to be writable
    yielded,    // the budget was used: let the loop run others, then go on
    eof,        // src sent FIN and the pipe is empty
    error,      // errno in `err`
  };

  // nullptr when out of descriptors or memory (the flow keeps copying instead).
  static std::unique_ptr<SplicePipe> open();
  // A pipe another process filled (take-over): it holds what FIONREAD says.
  static std::unique_ptr<SplicePipe> adopt(UniqueFd r, UniqueFd w);
  // Gives up both ends, with the bytes still in the pipe.
  void release(UniqueFd* r, UniqueFd* w) {
    *r = std::move(r_);
    *w = std::move(w_);
  }

  // Moves up to about `budget` bytes from src to dst; adds what reached dst to *moved.
  // `stop_when_drained`: a read that took less than half the pipe emptied src, so
  // return src_empty once those bytes are out instead of reading again (the caller
  // waits for more to gather; a FIN behind them is seen on the next call).
  Step pump(int src, int dst, size_t budget, size_t* moved, int* err, bool stop_when_drained = false);
  size_t pending() const { return piped_; }
  // The relay's waits for this flow (see GatherState).
  GatherState& gather() { return gather_; }

 private:
  SplicePipe(int r, int w, size_t capacity) : r_(r), w_(w), capacity_(capacity) {}
  UniqueFd r_;
  UniqueFd w_;
  size_t capacity_;
  size_t piped_ = 0;  // in the pipe, not yet in dst
  GatherState gather_;
};

// Sets O_NONBLOCK (io_uring's socket operations ignore it; splice needs it).
bool set_nonblocking(int fd);

}  // namespace kib::relay
