#include "agent/api/services/list_page.h"

#include "agent/api/conventions/page_token.h"

namespace kib::api {

Result<std::string> list_page(store::Store& store, const ListQuery& q, const TakeFn& take) {
  KIB_TRY_ASSIGN(auto size, effective_page_size(q.page_size));
  KIB_TRY(validate_labels(*q.selector, "label_selector"));
  KIB_TRY_ASSIGN(auto after, parse_page_token(store.page_token_secret(), q.kind_name, q.page_token, *q.selector));

  uint32_t taken = 0;
  uint64_t last_seq = 0;
  bool more = false;
  Status failed;
  KIB_TRY(store.read([&](store::Transaction& txn) -> Status {
    return txn.scan(q.kind, after, [&](store::ResourceRow&& row) {
      bool full = taken == size;
      auto r = take(row, !full);
      if (!r.ok()) {
        failed = std::move(r).error();
        return false;
      }
      if (!*r) return true;
      if (full) {
        more = true;
        return false;
      }
      ++taken;
      last_seq = row.seq;
      return true;
    });
  }));
  if (!failed.ok()) return failed.error();
  if (!more) return std::string();
  return make_page_token(store.page_token_secret(), q.kind_name, last_seq, *q.selector);
}

}  // namespace kib::api
