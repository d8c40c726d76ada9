#include "agent/api/http/http1_session.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>

#include "agent/api/connect/connect_error.h"

namespace kib::api {
namespace {

Http1Session* self(http_parser* p) { return static_cast<Http1Session*>(p->data); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Http1Session::Http1Session(ByteStream& stream, const HttpHandler& handler, std::string peer)
    : stream_(stream), handler_(handler), peer_(std::move(peer)) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
  http_parser_settings_init(&settings_);
  settings_.on_message_begin = on_message_begin;
  settings_.on_url = on_url;
  settings_.on_header_field = on_header_field;
  settings_.on_header_value = on_header_value;
  settings_.on_headers_complete = on_headers_complete;
  settings_.on_body = on_body;
  settings_.on_message_complete = on_message_complete;
}

void Http1Session::serve(std::string_view initial) {
  if (!initial.empty() && !feed(initial.data(), initial.size())) return;
  char buf[16384];
  for (;;) {
    stream_.request_pending_since(request_began_);
    ssize_t n = stream_.read(buf, sizeof buf);
    if (n <= 0) return;  // closed, idle timeout, request deadline or error
    if (!feed(buf, static_cast<size_t>(n))) return;
  }
}

bool Http1Session::feed(const char* data, size_t len) {
  while (len > 0) {
    chunk_begin_ = data;
    size_t used = http_parser_execute(&parser_, &settings_, data, len);
    for (size_t i = used; i > 0; --i) {
      if (data[i - 1] != ' ' && data[i - 1] != '\t') {
        last_non_space_ = data[i - 1];
        break;
      }
    }
    bool written = answer_ready();
    if (written && refused_by_headers_ && !closing_) {
      // Refused by its headers with its body still to come: answered now, as over
      // HTTP/2, not after a body the client may never send. The rest of the body is
      // left unread, so the connection closes after the answer ("connection: close").
      refused_by_headers_ = false;
      close_after_ = true;
      written = write_response(handler_.handle(current_), false);
    }
    if (close_after_) {
      // Answered without reading the body: let the client finish sending, then close.
      if (written) drain_after_early_response();
      return false;
    }
    if (!written || closing_) return false;
    enum http_errno err = HTTP_PARSER_ERRNO(&parser_);
    if (err != HPE_OK) {
      fail_parse(err);
      return false;
    }
    if (parser_.upgrade) {
      // No 101 was sent, so the client goes on speaking HTTP/1.1.
      http_parser_init(&parser_, HTTP_REQUEST);
      parser_.data = this;
    } else if (used != len) {
      fail(400, Error{Code::invalid_argument, "malformed request"});
      return false;
    }
    data += used;
    len -= used;
  }
  return true;
}

// Answers the complete requests in order; false if a write failed. A response that
// closes the connection sets closing_ and drops any request after it.
bool Http1Session::answer_ready() {
  while (!ready_.empty() && !closing_) {
    Pending p = std::move(ready_.front());
    ready_.pop_front();
    HttpResponse r = handler_.handle(p.request);
    const bool keep = p.keep_alive && !close_after_;
    if (!keep) closing_ = true;
    if (!write_response(r, keep)) return false;
  }
  ready_.clear();
  return true;
}

bool Http1Session::write_response(const HttpResponse& r, bool keep_alive) {
  std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + http_reason(r.status) + "\r\n";
  for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
  head += "content-length: " + std::to_string(r.body.size()) + "\r\n";
  if (!keep_alive) head += "connection: close\r\n";
  head += "\r\n";
  // One write for small responses, so a keep-alive client never waits on Nagle.
  if (r.body.size() < 65536) {
    head += r.body;
    return stream_.write_all(head.data(), head.size());
  }
  return stream_.write_all(head.data(), head.size()) && stream_.write_all(r.body.data(), r.body.size());
}

// A Connect error body, as every other refusal: clients read the same JSON whatever
// layer refused them.
void Http1Session::fail(int status, const Error& error) {
  (void)write_response(connect_error_response(error, status), false);
}

void Http1Session::fail_parse(enum http_errno err) {
  if (version_refusal_) return fail(version_refusal_->first, version_refusal_->second);
  if (url_too_long_)
    return fail(414,
                Error{Code::resource_exhausted, "request target longer than " + std::to_string(kMaxUrl) + " bytes"});
  if (too_many_headers_ || err == HPE_HEADER_OVERFLOW)
    return fail(431, Error{Code::resource_exhausted, "request headers too large"});
  // RFC 9112 section 5.2: "A server that receives an obs-fold in a request message ...
  // MUST either reject the message by sending a 400 (Bad Request) ... or replace each
  // received obs-fold with one or more SP octets": we reject it.
  if (obs_fold_) return fail(400, Error{Code::invalid_argument, "obsolete line folding in a header (obs-fold)"});
  fail(400, Error{Code::invalid_argument, std::string("malformed request: ") + http_errno_description(err)});
}

// A value starts after "name:" and optional whitespace; a continuation line (obs-fold)
// starts after a line break and whitespace. A value cut by a read goes on right after
// the last byte read, which is neither.
bool Http1Session::obs_fold_before(const char* value) const {
  const char* p = value;
  while (p > chunk_begin_ && (p[-1] == ' ' || p[-1] == '\t')) --p;
  const char before = p > chunk_begin_ ? p[-1] : last_non_space_;
  return before == '\n';
}

// After answering a request whose body we refused to read, read (and drop) what the
// client is still sending for a bounded time and size, so closing does not reset the
// connection before the client has read the answer.
void Http1Session::drain_after_early_response() {
  char buf[16384];
  size_t budget = handler_.max_body_bytes() * 2;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  // Each read too: a client that neither sends nor closes holds the connection for
  // these 2 s, not for the idle or request timeout.
  stream_.end_reads_by(until);
  while (budget > 0 && std::chrono::steady_clock::now() < until) {
    ssize_t n = stream_.read(buf, sizeof buf);
    if (n <= 0) return;
    budget -= std::min(budget, static_cast<size_t>(n));
  }
}

void Http1Session::commit_header() {
  if (!field_.empty()) {
    if (current_.headers.size() >= kMaxHeaders)
      too_many_headers_ = true;
    else
      current_.headers.emplace_back(lower(field_), value_);
  }
  field_.clear();
  value_.clear();
}

int Http1Session::on_message_begin(http_parser* p) {
  Http1Session* s = self(p);
  s->request_began_ = std::chrono::steady_clock::now();
  s->current_ = HttpRequest{};
  s->current_.peer = s->peer_;
  s->url_.clear();
  s->field_.clear();
  s->value_.clear();
  s->last_was_value_ = false;
  return 0;
}

int Http1Session::on_url(http_parser* p, const char* at, size_t len) {
  Http1Session* s = self(p);
  if (s->url_.size() + len > kMaxUrl) {
    s->url_too_long_ = true;
    return 1;
  }
  s->url_.append(at, len);
  return 0;
}

int Http1Session::on_header_field(http_parser* p, const char* at, size_t len) {
  Http1Session* s = self(p);
  if (s->last_was_value_) s->commit_header();
  s->field_.append(at, len);
  s->last_was_value_ = false;
  return s->too_many_headers_ ? 1 : 0;
}

int Http1Session::on_header_value(http_parser* p, const char* at, size_t len) {
  Http1Session* s = self(p);
  // An empty value is reported as zero bytes at the start of the next line.
  if (len > 0 && s->obs_fold_before(at)) {
    s->obs_fold_ = true;
    return 1;
  }
  s->value_.append(at, len);
  s->last_was_value_ = true;
  return 0;
}

int Http1Session::on_headers_complete(http_parser* p) {
  Http1Session* s = self(p);
  s->commit_header();
  if (s->too_many_headers_) return -1;
  // http-parser reads a request line without a version as HTTP/0.9, and any digit as
  // a major version.
  if (p->http_major == 0 && p->http_minor == 9) {
    s->version_refusal_.emplace(400, Error{Code::invalid_argument, "the request line has no HTTP version"});
    return -1;
  }
  if (p->http_major != 1) {
    const std::string version = std::to_string(p->http_major) + "." + std::to_string(p->http_minor);
    s->version_refusal_.emplace(
        505, Error{Code::unimplemented, "HTTP/" + version + " is not supported (HTTP/1.1 and HTTP/2 are)"});
    return -1;
  }
  HttpRequest& req = s->current_;
  req.method = http_method_str(static_cast<http_method>(p->method));
  req.path = s->url_.substr(0, s->url_.find('?'));
  if (p->content_length != ULLONG_MAX && p->content_length > s->handler_.max_body_bytes()) {
    req.body_too_large = true;
    s->close_after_ = true;
    return 1;  // skip the body: the request completes now and is refused
  }
  // A refusal the headers decide (unknown path, content type, method): feed() answers it
  // as soon as the bytes at hand are parsed, unless the body was among them.
  const bool body_follows = (p->flags & F_CHUNKED) || (p->content_length != ULLONG_MAX && p->content_length > 0);
  s->refused_by_headers_ = body_follows && s->handler_.answerable(req);
  if (s->refused_by_headers_) return 0;  // and no 100 Continue: the body is not wanted
  const std::string* expect = req.header("expect");
  if (expect != nullptr && lower(*expect) == "100-continue") {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (!s->stream_.write_all(kContinue, sizeof kContinue - 1)) return -1;
  }
  return 0;
}

int Http1Session::on_body(http_parser* p, const char* at, size_t len) {
  Http1Session* s = self(p);
  HttpRequest& req = s->current_;
  // A chunked body over the limit is read to its end but not kept.
  if (req.body_too_large || req.body.size() + len > s->handler_.max_body_bytes()) {
    req.body_too_large = true;
    req.body.clear();
    return 0;
  }
  req.body.append(at, len);
  return 0;
}

int Http1Session::on_message_complete(http_parser* p) {
  Http1Session* s = self(p);
  s->ready_.push_back(Pending{std::move(s->current_), http_should_keep_alive(p) != 0});
  s->current_ = HttpRequest{};
  s->refused_by_headers_ = false;  // whole after all: answered in turn, keep-alive kept
  s->request_began_.reset();
  return 0;
}

}  // namespace kib::api
