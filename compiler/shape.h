#pragma once
// Shape: a list of int64_t (a shape, strides, axes) that holds up to kInline values without a heap
// allocation, with std::vector's interface.
//
// Every UOp carries a shape and every View a shape and strides; as std::vectors they were two thirds of the
// allocations of recording an op (issue #13: 100 of the 159 mallocs of `y @ y.t() @ y`). Ranks above
// kInline spill to the heap, as a std::vector would hold them.

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <vector>

namespace tiny {

class Shape {
public:
  static constexpr size_t kInline = 6;
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  explicit Shape(size_t n, int64_t v = 0) { assign(n, v); }
  Shape(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator It> Shape(It first, It last) { assign(first, last); }
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); } // NOLINT: implicit, as a Shape was one
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { take(o); }
  ~Shape() { release(); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  operator std::vector<int64_t>() const { return {begin(), end()}; } // NOLINT: implicit, as a Shape was one

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  int64_t& operator[](size_t i) { return data_[i]; }
  const int64_t& operator[](size_t i) const { return data_[i]; }
  int64_t& at(size_t i) {
    if (i >= size_) throw std::out_of_range("Shape::at");
    return data_[i];
  }
  const int64_t& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("Shape::at");
    return data_[i];
  }
  int64_t& front() { return data_[0]; }
  const int64_t& front() const { return data_[0]; }
  int64_t& back() { return data_[size_ - 1]; }
  const int64_t& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    auto* grown = static_cast<int64_t*>(std::malloc(n * sizeof(int64_t)));
    if (!grown) throw std::bad_alloc();
    if (size_) std::memcpy(grown, data_, size_ * sizeof(int64_t));
    if (data_ != inline_) std::free(data_);
    data_ = grown;
    cap_ = static_cast<uint32_t>(n);
  }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t v = 0) {
    if (n > size_) {
      reserve(n);
      std::fill(data_ + size_, data_ + n, v);
    }
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t v) {
    if (size_ == cap_) reserve(2 * cap_);
    data_[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() { size_--; }
  void assign(size_t n, int64_t v) {
    size_ = 0;
    resize(n, v);
  }
  template <std::input_iterator It> void assign(It first, It last) {
    if constexpr (std::forward_iterator<It>) {
      auto n = static_cast<size_t>(std::distance(first, last));
      size_ = 0;
      reserve(n);
      std::copy(first, last, data_);
      size_ = static_cast<uint32_t>(n);
    } else {
      size_ = 0;
      for (; first != last; ++first)
        push_back(*first);
    }
  }
  void assign(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }

  iterator insert(const_iterator pos, int64_t v) { return insert(pos, size_t{1}, v); }
  iterator insert(const_iterator pos, size_t n, int64_t v) {
    size_t at = open(pos, n);
    std::fill(data_ + at, data_ + at + n, v);
    return data_ + at;
  }
  template <std::input_iterator It> iterator insert(const_iterator pos, It first, It last) {
    // (the values may be this Shape's own, which the opening moves: they are copied out first)
    Shape values(first, last);
    size_t at = open(pos, values.size());
    std::copy(values.begin(), values.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    auto at = static_cast<size_t>(first - data_), n = static_cast<size_t>(last - first);
    std::memmove(data_ + at, data_ + at + n, (size_ - at - n) * sizeof(int64_t));
    size_ -= static_cast<uint32_t>(n);
    return data_ + at;
  }

  friend bool operator==(const Shape& a, const Shape& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

private:
  int64_t* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
  int64_t inline_[kInline];

  void release() {
    if (data_ != inline_) std::free(data_);
    data_ = inline_;
    size_ = 0;
    cap_ = kInline;
  }
  // Moves o's values here (this holds none), leaving o empty.
  void take(Shape& o) {
    if (o.data_ == o.inline_) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(int64_t));
      data_ = inline_;
      cap_ = kInline;
    } else {
      data_ = o.data_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = kInline;
    }
    size_ = o.size_;
    o.size_ = 0;
  }
  // Makes room for n values at pos; returns pos's index.
  size_t open(const_iterator pos, size_t n) {
    auto at = static_cast<size_t>(pos - data_);
    if (size_ + n > cap_) reserve(std::max<size_t>(size_ + n, 2 * cap_));
    std::memmove(data_ + at + n, data_ + at, (size_ - at) * sizeof(int64_t));
    size_ += static_cast<uint32_t>(n);
    return at;
  }
};

} // namespace tiny
