#include "agent/relay/tls_bio.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace kib::relay {
namespace {

// One method per kind for the process: BIO_METHODs are immutable once set up.
BIO_METHOD* make_method(const char* name, int (*read)(BIO*, char*, size_t, size_t*),
                        int (*write)(BIO*, const char*, size_t, size_t*), long (*ctrl)(BIO*, int, long, void*)) {
  BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, name);
  if (m == nullptr) return nullptr;
  if (read != nullptr) BIO_meth_set_read_ex(m, read);
  if (write != nullptr) BIO_meth_set_write_ex(m, write);
  BIO_meth_set_ctrl(m, ctrl);
  return m;
}

BIO* new_bio(BIO_METHOD* method, void* box) {
  if (method == nullptr) return nullptr;
  BIO* b = BIO_new(method);
  if (b == nullptr) return nullptr;
  BIO_set_data(b, box);
  BIO_set_init(b, 1);
  return b;
}

int inbox_read(BIO* b, char* out, size_t cap, size_t* got) {
  auto* in = static_cast<TlsInbox*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  *got = in->read(reinterpret_cast<uint8_t*>(out), cap);
  if (*got > 0) return 1;
  if (!in->eof()) BIO_set_retry_read(b);  // "wait for more", as an empty socket would
  return 0;
}

long inbox_ctrl(BIO* b, int cmd, long, void*) {
  auto* in = static_cast<TlsInbox*>(BIO_get_data(b));
  switch (cmd) {
    case BIO_CTRL_PENDING: return static_cast<long>(in->pending());
    case BIO_CTRL_EOF: return in->eof() && in->pending() == 0 ? 1 : 0;
    case BIO_CTRL_FLUSH: return 1;
    default: return 0;
  }
}

int outbox_write(BIO* b, const char* data, size_t len, size_t* written) {
  BIO_clear_retry_flags(b);
  static_cast<TlsOutbox*>(BIO_get_data(b))->append(reinterpret_cast<const uint8_t*>(data), len);
  *written = len;
  return 1;
}

long outbox_ctrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;  // written is as good as sent: nothing waits in the BIO
}

template <typename T>
void free_if_empty(std::vector<T>& v) {
  if (v.empty()) std::vector<T>().swap(v);
}

}  // namespace

BIO* TlsInbox::new_bio() {
  static BIO_METHOD* const method = make_method("kibotos tls inbox", inbox_read, nullptr, inbox_ctrl);
  return relay::new_bio(method, this);
}

void TlsInbox::append(const uint8_t* data, size_t len) {
  if (kept_off_ > 0) {  // what was read goes first: the buffer holds one record's worth
    kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(kept_off_));
    kept_off_ = 0;
  }
  kept_.insert(kept_.end(), data, data + len);
}

void TlsInbox::lend(const uint8_t* data, size_t len) {
  assert(loan_len_ == 0);  // the previous loan ended before its buffer went back
  loan_ = data;
  loan_len_ = len;
}

void TlsInbox::end_loan() {
  const uint8_t* rest = loan_;
  const size_t n = loan_len_;
  loan_ = nullptr;
  loan_len_ = 0;
  if (n > 0) append(rest, n);
}

size_t TlsInbox::read(uint8_t* out, size_t cap) {
  size_t n = 0;
  if (kept_off_ < kept_.size()) {
    n = std::min(cap, kept_.size() - kept_off_);
    std::memcpy(out, kept_.data() + kept_off_, n);
    kept_off_ += n;
    if (kept_off_ == kept_.size()) {
      kept_.clear();
      kept_off_ = 0;
    }
  }
  if (n < cap && loan_len_ > 0) {
    const size_t m = std::min(cap - n, loan_len_);
    std::memcpy(out + n, loan_, m);
    loan_ += m;
    loan_len_ -= m;
    n += m;
  }
  return n;
}

void TlsInbox::release_spare() { free_if_empty(kept_); }

BIO* TlsOutbox::new_bio() {
  static BIO_METHOD* const method = make_method("kibotos tls outbox", nullptr, outbox_write, outbox_ctrl);
  return relay::new_bio(method, this);
}

void TlsOutbox::append(const uint8_t* data, size_t len) { filling_.insert(filling_.end(), data, data + len); }

std::span<uint8_t> TlsOutbox::next() {
  if (sent_ == sending_.size()) {
    sending_.swap(filling_);
    filling_.clear();  // keeps the capacity of the buffer just sent
    sent_ = 0;
  }
  return {sending_.data() + sent_, sending_.size() - sent_};
}

void TlsOutbox::consume(size_t n) {
  sent_ += std::min(n, sending_.size() - sent_);
  if (sent_ == sending_.size()) {
    sending_.clear();
    sent_ = 0;
  }
}

size_t TlsOutbox::take(uint8_t* out, size_t cap) {
  size_t n = 0;
  while (n < cap && pending() > 0) {
    const std::span<uint8_t> part = next();
    const size_t m = std::min(cap - n, part.size());
    std::memcpy(out + n, part.data(), m);
    consume(m);
    n += m;
  }
  return n;
}

void TlsOutbox::release_spare() {
  free_if_empty(sending_);
  free_if_empty(filling_);
}

}  // namespace kib::relay
