#pragma once
// HTTP/2 on one connection with libnghttp2's server session: prior knowledge (h2c) on
// the Unix socket, ALPN "h2" on TLS. Streams are answered in the order they complete;
// streaming calls (gRPC, gRPC-Web, Connect streaming) as their messages arrive.
#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/http_message.h"
#include "agent/api/http/session_waker.h"
#include "agent/common/c_ptr.h"

namespace kib::api {

using Nghttp2SessionPtr = CPtr<nghttp2_session_del>;

class Http2Session {
 public:
  // waker: wakes this session from other threads (a health Watch's readiness change,
  // the server's stop); without one, streams that wait for events are refused.
  Http2Session(ByteStream& stream, const HttpHandler& handler, std::string peer,
               std::shared_ptr<SessionWaker> waker = nullptr);
  // Serves until the peer closes, times out or errs. `initial` holds bytes already
  // read (the client preface, at least its start).
  void serve(std::string_view initial);

  struct Stream {
    HttpRequest request;
    HttpResponse response;
    size_t header_bytes = 0;
    size_t received = 0;  // body bytes, kept or not
    size_t sent = 0;
    bool responded = false;
    bool request_complete = false;
    std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();
    // A call answered as its body arrives (handler.open()), and what it has to send.
    std::unique_ptr<StreamingCall> call;
    std::string out;
    size_t out_sent = 0;
    bool out_finished = false;
    HttpHeaders out_trailers;
  };

 private:
  static constexpr uint32_t kMaxConcurrentStreams = 100;
  static constexpr size_t kMaxHeaderBytes = 65536;
  // Rapid reset (CVE-2023-44487): nghttp2's own defaults (a burst of 1000 RST_STREAM,
  // then 33 a second), enforced here so that the GOAWAY says ENHANCE_YOUR_CALM.
  static constexpr double kResetBurst = 1000, kResetsPerSecond = 33;
  // Streams we reset recently, whose HEADERS (trailers the client sent before it saw
  // the reset) are not a protocol error.
  static constexpr size_t kRememberedResets = 128;

  bool start();
  bool receive(const char* data, size_t len);
  // What woke the session: asks every call for what it has now (and, when the agent
  // stops, ends those that wait for events), then sends it.
  bool on_wake();
  size_t waiting_streams() const;
  // The idle timeout passed with a stream waiting for events: PING the client once; a
  // client that answers nothing within the next timeout is gone.
  bool keepalive();
  // Submits what a call produced.
  bool submit_output(int32_t stream_id, Stream& s, StreamOutput& out);
  std::optional<std::chrono::steady_clock::time_point> oldest_pending_request() const;
  bool answer_ready();
  bool respond(int32_t stream_id, Stream& s);
  // Feeds a streaming call and submits what it produced.
  bool feed_call(int32_t stream_id, Stream& s, std::string_view data, bool end);
  Stream* find(int32_t stream_id);
  // RFC 9113 section 5.1.1: a HEADERS frame on a stream id lower than the last one
  // the client opened, on a stream that is not open, is a PROTOCOL_ERROR.
  bool headers_on_a_used_stream_id(const nghttp2_frame_hd& hd) const;
  bool take_reset_token();
  // Ends the connection with GOAWAY(error_code) once it is sent.
  void goaway(uint32_t error_code);

  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* ud);
  static ssize_t on_send(nghttp2_session*, const uint8_t* data, size_t len, int, void* ud);
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* ud);
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void* ud);
  static int on_data_chunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len, void* ud);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* ud);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* ud);
  static int on_stream_close(nghttp2_session*, int32_t stream_id, uint32_t, void* ud);
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                           nghttp2_data_source* source, void*);
  static ssize_t read_call_output(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t len, uint32_t* flags,
                                  nghttp2_data_source* source, void*);

  ByteStream& stream_;
  const HttpHandler& handler_;
  std::string peer_;
  std::shared_ptr<SessionWaker> waker_;
  bool ping_outstanding_ = false;
  Nghttp2SessionPtr session_;
  std::map<int32_t, std::unique_ptr<Stream>> streams_;
  std::vector<int32_t> ready_;
  int32_t last_client_stream_ = 0;
  std::deque<int32_t> reset_streams_;
  double reset_tokens_ = kResetBurst;
  std::chrono::steady_clock::time_point reset_tokens_at_ = std::chrono::steady_clock::now();
};

}  // namespace kib::api
