#pragma once
// HTTP/2 on one connection with libnghttp2's server session: prior knowledge (h2c) on
// the Unix socket, ALPN "h2" on TLS. Streams are answered in the order they complete;
// streaming calls (gRPC, gRPC-Web, Connect streaming) as their messages arrive.
#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/http_message.h"
#include "agent/common/c_ptr.h"

namespace kib::api {

using Nghttp2SessionPtr = CPtr<nghttp2_session_del>;

class Http2Session {
 public:
  Http2Session(ByteStream& stream, const HttpHandler& handler, std::string peer);
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

  bool start();
  bool receive(const char* data, size_t len);
  std::optional<std::chrono::steady_clock::time_point> oldest_pending_request() const;
  bool answer_ready();
  bool respond(int32_t stream_id, Stream& s);
  // Feeds a streaming call and submits what it produced.
  bool feed_call(int32_t stream_id, Stream& s, std::string_view data, bool end);
  Stream* find(int32_t stream_id);

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
  Nghttp2SessionPtr session_;
  std::map<int32_t, std::unique_ptr<Stream>> streams_;
  std::vector<int32_t> ready_;
};

}  // namespace kib::api
