#include "agent/api/http/http2_session.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace kib::api {
namespace {

Http2Session* self(void* ud) { return static_cast<Http2Session*>(ud); }

nghttp2_nv make_nv(const std::string& name, const std::string& value) {
  // nghttp2 copies names and values when submitting (no NO_COPY flags).
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                    NGHTTP2_NV_FLAG_NONE};
}

// A response's head (:status, then the headers), and its body when `body` is given.
bool submit_response(nghttp2_session* session, int32_t stream_id, int status, const HttpHeaders& headers,
                     nghttp2_data_provider* body) {
  const std::string code = std::to_string(status);
  const std::string status_name = ":status";
  std::vector<nghttp2_nv> nva{make_nv(status_name, code)};
  for (const auto& [k, v] : headers) nva.push_back(make_nv(k, v));
  return nghttp2_submit_response(session, stream_id, nva.data(), nva.size(), body) == 0;
}

}  // namespace

Http2Session::Http2Session(ByteStream& stream, const HttpHandler& handler, std::string peer,
                           std::shared_ptr<SessionWaker> waker)
    : stream_(stream), handler_(handler), peer_(std::move(peer)), waker_(std::move(waker)) {}

bool Http2Session::start() {
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return false;
  nghttp2_session_callbacks_set_send_callback(cbs, on_send);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_option* option = nullptr;
  if (nghttp2_option_new(&option) != 0) {
    nghttp2_session_callbacks_del(cbs);
    return false;
  }
  // Our own limit replaces nghttp2's, whose GOAWAY says INTERNAL_ERROR (take_reset_token).
  nghttp2_option_set_stream_reset_rate_limit(option, UINT64_MAX, UINT64_MAX);
  nghttp2_session* raw = nullptr;
  int rv = nghttp2_session_server_new2(&raw, cbs, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) return false;
  session_.reset(raw);
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderBytes},
  };
  return nghttp2_submit_settings(session_.get(), NGHTTP2_FLAG_NONE, settings, 2) == 0;
}

void Http2Session::serve(std::string_view initial) {
  if (!start()) return;
  if (!initial.empty() && !receive(initial.data(), initial.size())) return;
  char buf[16384];
  while (nghttp2_session_want_read(session_.get()) || nghttp2_session_want_write(session_.get())) {
    if (nghttp2_session_send(session_.get()) != 0) return;
    if (!nghttp2_session_want_read(session_.get())) continue;
    const auto pending = oldest_pending_request();
    const size_t waiting = waiting_streams();
    stream_.request_pending_since(pending);
    stream_.holds_waiting_stream(waiting > 0);
    if (waker_) {
      // A stream that began to wait after the stop ends as those before it did.
      if (waiting > 0 && waker_->stopping()) {
        if (!on_wake()) return;
        continue;
      }
      waker_->set_waiting_streams(waiting);
      const ByteStream::Wait w = stream_.wait_readable(waker_->fd());
      if (w == ByteStream::Wait::woken) {
        if (!on_wake()) return;
        continue;
      }
      if (w == ByteStream::Wait::timed_out) {
        if (waiting == 0 || pending || !keepalive()) return;
        continue;
      }
    }
    ssize_t n = stream_.read(buf, sizeof buf);
    if (n <= 0) return;
    ping_outstanding_ = false;  // the client is there
    if (!receive(buf, static_cast<size_t>(n))) return;
  }
}

bool Http2Session::on_wake() {
  waker_->clear();
  const bool stopping = waker_->stopping();
  std::vector<int32_t> ids;
  for (const auto& [id, s] : streams_)
    if (s->call && !s->out_finished) ids.push_back(id);
  for (int32_t id : ids) {
    Stream* s = find(id);
    if (s == nullptr) continue;
    StreamOutput out;
    s->call->on_wake(out);
    if (stopping) s->call->on_stop(out);
    if (!submit_output(id, *s, out)) return false;
  }
  return nghttp2_session_send(session_.get()) == 0;
}

size_t Http2Session::waiting_streams() const {
  size_t n = 0;
  for (const auto& [id, s] : streams_)
    if (s->call && s->call->waiting()) ++n;
  return n;
}

bool Http2Session::keepalive() {
  if (ping_outstanding_) return false;
  ping_outstanding_ = true;
  return nghttp2_submit_ping(session_.get(), NGHTTP2_FLAG_NONE, nullptr) == 0;
}

// The oldest request still being received. A streaming call's request side stays
// open as long as its client wants (answered as it arrives): not a pending request.
std::optional<std::chrono::steady_clock::time_point> Http2Session::oldest_pending_request() const {
  std::optional<std::chrono::steady_clock::time_point> oldest;
  for (const auto& [id, s] : streams_)
    if (!s->request_complete && !s->call && (!oldest || s->began < *oldest)) oldest = s->began;
  return oldest;
}

bool Http2Session::receive(const char* data, size_t len) {
  ssize_t rv = nghttp2_session_mem_recv(session_.get(), reinterpret_cast<const uint8_t*>(data), len);
  if (rv < 0) {
    // nghttp2 stops a flood (of frames it must acknowledge, or of CONTINUATION)
    // without a GOAWAY: RFC 9113 section 5.4.1 names the code for it.
    if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)
      (void)nghttp2_session_terminate_session(session_.get(), NGHTTP2_ENHANCE_YOUR_CALM);
    (void)nghttp2_session_send(session_.get());  // GOAWAY, if one is queued
    return false;
  }
  return answer_ready() && nghttp2_session_send(session_.get()) == 0;
}

Http2Session::Stream* Http2Session::find(int32_t stream_id) {
  auto it = streams_.find(stream_id);
  return it == streams_.end() ? nullptr : it->second.get();
}

bool Http2Session::answer_ready() {
  std::vector<int32_t> ready;
  ready.swap(ready_);
  for (int32_t id : ready) {
    Stream* s = find(id);
    if (s == nullptr || s->responded) continue;
    s->response = handler_.handle(s->request);
    if (!respond(id, *s)) return false;
  }
  return true;
}

bool Http2Session::respond(int32_t stream_id, Stream& s) {
  s.responded = true;
  s.request.body.clear();
  HttpResponse& r = s.response;
  r.headers.emplace_back("content-length", std::to_string(r.body.size()));
  nghttp2_data_provider body;
  body.source.ptr = &s;
  body.read_callback = read_body;
  return submit_response(session_.get(), stream_id, r.status, r.headers, r.body.empty() ? nullptr : &body);
}

ssize_t Http2Session::read_body(nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                                nghttp2_data_source* source, void*) {
  auto* s = static_cast<Stream*>(source->ptr);
  size_t n = std::min(len, s->response.body.size() - s->sent);
  std::memcpy(buf, s->response.body.data() + s->sent, n);
  s->sent += n;
  if (s->sent == s->response.body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

bool Http2Session::feed_call(int32_t stream_id, Stream& s, std::string_view data, bool end) {
  StreamOutput out;
  s.call->on_body(data, end, out);
  return submit_output(stream_id, s, out);
}

bool Http2Session::submit_output(int32_t stream_id, Stream& s, StreamOutput& out) {
  s.out += out.data;
  if (out.finished) {
    s.out_finished = true;
    s.out_trailers = std::move(out.trailers);
  }
  if (out.head && !s.responded) {
    s.responded = true;
    // A response that is only its head (gRPC's Trailers-Only) ends with it.
    const bool head_only = s.out_finished && s.out.empty() && s.out_trailers.empty();
    nghttp2_data_provider body;
    body.source.ptr = &s;
    body.read_callback = read_call_output;
    return submit_response(session_.get(), stream_id, out.status, out.headers, head_only ? nullptr : &body);
  }
  if (s.responded && (!out.data.empty() || out.finished)) {
    int rv = nghttp2_session_resume_data(session_.get(), stream_id);
    return rv == 0 || rv == NGHTTP2_ERR_INVALID_ARGUMENT;  // not deferred: nothing to resume
  }
  return true;
}

ssize_t Http2Session::read_call_output(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t len,
                                       uint32_t* flags, nghttp2_data_source* source, void*) {
  auto* s = static_cast<Stream*>(source->ptr);
  const size_t n = std::min(len, s->out.size() - s->out_sent);
  std::memcpy(buf, s->out.data() + s->out_sent, n);
  s->out_sent += n;
  if (s->out_sent == s->out.size()) {
    s->out.clear();
    s->out_sent = 0;
    if (!s->out_finished) return n == 0 ? static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED) : static_cast<ssize_t>(n);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!s->out_trailers.empty()) {
      std::vector<nghttp2_nv> nva;
      for (const auto& [k, v] : s->out_trailers) nva.push_back(make_nv(k, v));
      if (nghttp2_submit_trailer(session, stream_id, nva.data(), nva.size()) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
  }
  return static_cast<ssize_t>(n);
}

bool Http2Session::headers_on_a_used_stream_id(const nghttp2_frame_hd& hd) const {
  // Even ids are the server's: nghttp2 refuses those itself.
  if (hd.type != NGHTTP2_HEADERS || hd.stream_id % 2 == 0 || hd.stream_id > last_client_stream_) return false;
  // A stream nghttp2 still knows: trailers, or an error nghttp2 names itself.
  if (nghttp2_session_get_stream_remote_close(session_.get(), hd.stream_id) != -1) return false;
  return std::find(reset_streams_.begin(), reset_streams_.end(), hd.stream_id) == reset_streams_.end();
}

bool Http2Session::take_reset_token() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - reset_tokens_at_).count();
  reset_tokens_ = std::min(kResetBurst, reset_tokens_ + seconds * kResetsPerSecond);
  reset_tokens_at_ = now;
  if (reset_tokens_ < 1) return false;
  reset_tokens_ -= 1;
  return true;
}

void Http2Session::goaway(uint32_t error_code) { (void)nghttp2_session_terminate_session(session_.get(), error_code); }

int Http2Session::on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* ud) {
  Http2Session* h = self(ud);
  if (h->headers_on_a_used_stream_id(*hd)) {
    // "An endpoint that receives an unexpected stream identifier MUST respond with a
    // connection error of type PROTOCOL_ERROR"; nghttp2 ignores it when it no longer
    // knows the stream.
    h->goaway(NGHTTP2_PROTOCOL_ERROR);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (hd->type == NGHTTP2_HEADERS && hd->stream_id % 2 == 1)
    h->last_client_stream_ = std::max(h->last_client_stream_, hd->stream_id);
  return 0;
}

ssize_t Http2Session::on_send(nghttp2_session*, const uint8_t* data, size_t len, int, void* ud) {
  if (!self(ud)->stream_.write_all(data, len)) return NGHTTP2_ERR_CALLBACK_FAILURE;
  return static_cast<ssize_t>(len);
}

int Http2Session::on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto s = std::make_unique<Stream>();
  s->request.peer = self(ud)->peer_;
  s->request.waker = self(ud)->waker_;
  self(ud)->streams_[frame->hd.stream_id] = std::move(s);
  return 0;
}

int Http2Session::on_header(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                            const uint8_t* value, size_t valuelen, uint8_t, void* ud) {
  Http2Session* h = self(ud);
  Stream* s = h->find(frame->hd.stream_id);
  if (s == nullptr || frame->hd.type != NGHTTP2_HEADERS) return 0;  // trailers are ignored
  s->header_bytes += namelen + valuelen;
  if (s->header_bytes > kMaxHeaderBytes || s->request.headers.size() > 100) {
    // A flood of header fields: the stream is reset with ENHANCE_YOUR_CALM, queued
    // first so that nghttp2 does not add its own RST_STREAM(INTERNAL_ERROR).
    (void)nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_ENHANCE_YOUR_CALM);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  std::string n(reinterpret_cast<const char*>(name), namelen);
  std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":method") {
    s->request.method = std::move(v);
  } else if (n == ":path") {
    s->request.path = v.substr(0, v.find('?'));
  } else if (!n.starts_with(':')) {
    if (n == "content-length") {
      uint64_t cl = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), cl);
      if (ec == std::errc() && end == v.data() + v.size() && cl > h->handler_.max_body_bytes())
        s->request.body_too_large = true;
    }
    s->request.headers.emplace_back(std::move(n), std::move(v));
  }
  return 0;
}

int Http2Session::on_data_chunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                                void* ud) {
  Http2Session* h = self(ud);
  Stream* s = h->find(stream_id);
  if (s != nullptr && s->call) {
    if (s->out_finished) return 0;  // answered: the rest of the request is dropped
    std::string_view chunk(reinterpret_cast<const char*>(data), len);
    return h->feed_call(stream_id, *s, chunk, false) ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (s == nullptr || s->responded) return 0;
  const size_t max = h->handler_.max_body_bytes();
  s->received += len;
  if (s->received > max) s->request.body_too_large = true;
  if (!s->request.body_too_large) {
    s->request.body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  // An oversized body is read and dropped, and answered (resource_exhausted) when it
  // ends: clients handle that best. One that goes on far past the limit is answered
  // at once and its stream reset.
  s->request.body.clear();
  if (s->received > 4 * max) h->ready_.push_back(stream_id);
  return 0;
}

int Http2Session::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
  Http2Session* h = self(ud);
  if (frame->hd.type == NGHTTP2_RST_STREAM && !h->take_reset_token()) {
    h->goaway(NGHTTP2_ENHANCE_YOUR_CALM);
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  Stream* s = h->find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
    s->call = h->handler_.open(s->request);
  if (s->call) {
    // Started with the headers (a refusal goes out now), fed by on_data_chunk.
    if (end) s->request_complete = true;
    if (s->out_finished || (frame->hd.type == NGHTTP2_DATA && !end)) return 0;
    return h->feed_call(frame->hd.stream_id, *s, {}, end) ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (end) {
    s->request_complete = true;
    if (!s->responded) h->ready_.push_back(frame->hd.stream_id);
  } else if (!s->responded && h->handler_.answerable(s->request)) {
    // Refusals go out as soon as the headers are in, and a whole message is answered
    // while the client keeps its side open; on_frame_send then resets the stream.
    h->ready_.push_back(frame->hd.stream_id);
  }
  return 0;
}

int Http2Session::on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* ud) {
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    auto& resets = self(ud)->reset_streams_;
    resets.push_back(frame->hd.stream_id);
    if (resets.size() > kRememberedResets) resets.pop_front();
    return 0;
  }
  // A response sent before the request ended (an oversized body): tell the client to
  // stop sending with RST_STREAM(NO_ERROR), as RFC 9113 section 8.1 allows.
  if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  Stream* s = self(ud)->find(frame->hd.stream_id);
  if (s != nullptr && !s->request_complete)
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
  return 0;
}

int Http2Session::on_stream_close(nghttp2_session*, int32_t stream_id, uint32_t, void* ud) {
  self(ud)->streams_.erase(stream_id);
  return 0;
}

}  // namespace kib::api
