#include "agent/ctl/policy_wait.h"

#include <algorithm>
#include <thread>

namespace kib::ctl {
namespace {

namespace v1 = kibotos::ctrl::v1;
using std::chrono::milliseconds;

constexpr milliseconds kFirstPoll{250};
constexpr milliseconds kMaxPoll{2000};

bool applied(const v1::Workspace& w, uint64_t revision) {
  return w.network_policy_status().applied_revision() == revision && w.network_policy_status().error().empty();
}

std::string seconds_text(milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}

}  // namespace

WaitClock real_clock() {
  return {[] { return std::chrono::steady_clock::now(); }, [](milliseconds d) { std::this_thread::sleep_for(d); }};
}

Result<v1::Workspace> wait_policy_applied(const v1::Workspace& written,
                                          const std::function<Result<v1::Workspace>()>& get, milliseconds timeout,
                                          const WaitClock& clock) {
  const uint64_t revision = written.network_policy().revision();
  const auto deadline = clock.now() + timeout;
  v1::Workspace last = written;
  milliseconds pause = kFirstPoll;
  while (!applied(last, revision)) {
    const auto now = clock.now();
    if (now >= deadline) {
      const auto& st = last.network_policy_status();
      return Error{Code::deadline_exceeded,
                   "workspace " + written.workspace_id() + ": policy revision " + std::to_string(revision) +
                       " not applied within " + seconds_text(timeout) + ": applied revision " +
                       std::to_string(st.applied_revision()) +
                       (st.error().empty() ? ", no error reported" : ", error: " + st.error())};
    }
    clock.sleep(std::min(pause, std::chrono::duration_cast<milliseconds>(deadline - now)));
    pause = std::min(pause * 2, kMaxPoll);
    KIB_TRY_ASSIGN(auto w, get());
    last = std::move(w);
  }
  return last;
}

}  // namespace kib::ctl
