#pragma once
// Wakes the thread that serves a call from another thread: a server stream's source
// (a health Watch) learns of an event there (a readiness change), and its session then
// asks the call for what to send (StreamingCall::on_wake). Header-only, so that the
// method libraries can hold one without depending on the transport.
namespace kib::api {

class CallWaker {
 public:
  // Any thread; never blocks. Waking a session that already ended does nothing.
  virtual void wake() const = 0;

 protected:
  ~CallWaker() = default;
};

}  // namespace kib::api
