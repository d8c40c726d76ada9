#pragma once
// The one intrusive doubly-linked list of the tree: no allocation per element, O(1)
// unlink from the element alone. An element derives from ListNode<Tag> once per list
// it can be on (the Tag tells the lists apart). Loop-thread only, like its users.
#include <cstddef>

namespace kib::uring {

template <typename T, typename Tag>
class IntrusiveList;

template <typename Tag>
class ListNode {
 public:
  ListNode() = default;
  // Destroying a linked node unlinks it: a list never points at a freed element.
  ~ListNode() { unlink(); }
  ListNode(const ListNode&) = delete;
  ListNode& operator=(const ListNode&) = delete;

  bool linked() const { return next_ != nullptr; }
  void unlink() {
    if (!linked()) return;
    prev_->next_ = next_;
    next_->prev_ = prev_;
    prev_ = next_ = nullptr;
  }

 private:
  template <typename, typename>
  friend class IntrusiveList;
  ListNode* prev_ = nullptr;
  ListNode* next_ = nullptr;
};

// Circular, with a sentinel: neither copyable nor movable (elements point at it).
template <typename T, typename Tag = T>
class IntrusiveList {
  using Node = ListNode<Tag>;

 public:
  IntrusiveList() { head_.prev_ = head_.next_ = &head_; }
  ~IntrusiveList() { clear(); }
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return head_.next_ == &head_; }
  // Unlinked elements only (linking twice is a bug).
  void push_back(T& x) { insert_before(head_, node(x)); }
  void push_front(T& x) { insert_before(*head_.next_, node(x)); }
  T* front() { return empty() ? nullptr : elem(head_.next_); }
  T* pop_front() {
    T* x = front();
    if (x != nullptr) node(*x).unlink();
    return x;
  }
  // Unlinks every element (leaves them alive).
  void clear() {
    while (!empty()) head_.next_->unlink();
  }
  size_t size() const {
    size_t n = 0;
    for (const Node* p = head_.next_; p != &head_; p = p->next_) ++n;
    return n;
  }
  // Calls fn(T&) for each element in order. fn may unlink or free the element it is
  // given (the next one is read first), not any other.
  template <typename F>
  void for_each(F&& fn) {
    for (Node* p = head_.next_; p != &head_;) {
      Node* next = p->next_;
      fn(*elem(p));
      p = next;
    }
  }
  // As for_each, stopping after the first element for which fn returns false.
  template <typename F>
  void for_each_while(F&& fn) {
    for (Node* p = head_.next_; p != &head_;) {
      Node* next = p->next_;
      if (!fn(*elem(p))) return;
      p = next;
    }
  }

 private:
  static Node& node(T& x) { return static_cast<Node&>(x); }
  static T* elem(Node* p) { return static_cast<T*>(p); }
  static void insert_before(Node& at, Node& n) {
    n.next_ = &at;
    n.prev_ = at.prev_;
    at.prev_->next_ = &n;
    at.prev_ = &n;
  }
  Node head_;
};

}  // namespace kib::uring
