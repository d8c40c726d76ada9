#pragma once
// One page of a List RPC over the store: checks page_size, page_token and the label
// selector, then walks resources in creation order after the token's position.
#include <functional>
#include <string>
#include <vector>

#include "agent/api/conventions/labels.h"
#include "agent/store/store.h"

namespace kib::api {

struct ListQuery {
  store::Kind kind;
  const char* kind_name;  // binds page tokens to their resource kind
  uint32_t page_size = 0;
  std::string page_token;
  const StringMap* selector = nullptr;
};

// Called for each candidate in order: decodes it and returns whether its labels match
// the selector; appends it to the response only when it matches and append is true
// (false when the page is full and the call only asks whether another page exists).
using TakeFn = std::function<Result<bool>(const store::ResourceRow&, bool append)>;

// Returns next_page_token ("" on the last page).
Result<std::string> list_page(store::Store& store, const ListQuery& q, const TakeFn& take);

}  // namespace kib::api
