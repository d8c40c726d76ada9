#include "agent/api/conventions/page_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace kib::api {
namespace {

constexpr size_t kMacBytes = 32;

std::string to_hex(std::string_view bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool from_hex(std::string_view hex, std::string& out) {
  if (hex.size() % 2) return false;
  out.clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

// The selector in a canonical form: entries sorted, each length-prefixed.
std::string selector_digest(const StringMap& selector) {
  std::vector<std::pair<std::string, std::string>> entries(selector.begin(), selector.end());
  std::sort(entries.begin(), entries.end());
  std::string canon;
  for (const auto& [k, v] : entries) {
    canon += std::to_string(k.size()) + ":" + k + std::to_string(v.size()) + ":" + v;
  }
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(canon.data()), canon.size(), md);
  return std::string(reinterpret_cast<char*>(md), sizeof md);
}

std::string seq_bytes(uint64_t seq) {
  std::string b(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) b[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
  return b;
}

std::string mac(std::string_view secret, std::string_view kind, std::string_view seq, const StringMap& selector) {
  std::string msg(kind);
  msg += '|';
  msg += seq;
  msg += '|';
  msg += selector_digest(selector);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

Result<uint32_t> effective_page_size(uint32_t requested) {
  if (requested == 0) return kDefaultPageSize;
  if (requested > kMaxPageSize)
    return Error{Code::invalid_argument,
                 "page_size " + std::to_string(requested) + " is above the maximum " + std::to_string(kMaxPageSize)};
  return requested;
}

std::string make_page_token(std::string_view secret, std::string_view kind, uint64_t last_seq,
                            const StringMap& selector) {
  std::string seq = seq_bytes(last_seq);
  return to_hex(seq + mac(secret, kind, seq, selector));
}

Result<uint64_t> parse_page_token(std::string_view secret, std::string_view kind, std::string_view token,
                                  const StringMap& selector) {
  if (token.empty()) return uint64_t{0};
  Error bad{Code::invalid_argument, "page_token is invalid, or was issued for another label_selector"};
  std::string raw;
  if (token.size() != 2 * (8 + kMacBytes) || !from_hex(token, raw)) return bad;
  std::string seq = raw.substr(0, 8);
  std::string expected = mac(secret, kind, seq, selector);
  if (CRYPTO_memcmp(expected.data(), raw.data() + 8, kMacBytes) != 0) return bad;
  uint64_t v = 0;
  for (unsigned char c : seq) v = (v << 8) | c;
  return v;
}

}  // namespace kib::api
