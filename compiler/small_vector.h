#pragma once
// SmallVector<T, N>: a vector that holds its first N elements inline, without a heap allocation; a subset of
// std::vector's interface (what the compiler's lists of views use).
//
// A ShapeTracker is nearly always one View and a UOp has at most three sources but for a few: as std::vectors
// they cost an allocation per tracker built, copied or composed and per node while recording an op (issue #13).

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace tiny {

template <class T, size_t N> class SmallVector {
public:
  using value_type = T;
  using size_type = size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reference = T&;
  using const_reference = const T&;

  SmallVector() = default;
  SmallVector(std::initializer_list<T> values) {
    reserve(values.size());
    for (const T& v : values)
      push_back(v);
  }
  template <class It> SmallVector(It first, It last) {
    for (; first != last; ++first)
      push_back(*first);
  }
  SmallVector(const std::vector<T>& v) : SmallVector(v.begin(), v.end()) {} // NOLINT: implicit, as a std::vector
  SmallVector(const SmallVector& o) {
    reserve(o.size_);
    std::uninitialized_copy(o.begin(), o.end(), data_);
    size_ = o.size_;
  }
  SmallVector(SmallVector&& o) noexcept { take(o); }
  ~SmallVector() { release(); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) {
      SmallVector copy(o);
      release();
      take(copy);
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    T* grown = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    std::uninitialized_move(begin(), end(), grown);
    std::destroy(begin(), end());
    free_heap();
    data_ = grown;
    cap_ = n;
  }
  template <class... Args> T& emplace_back(Args&&... args) {
    if (size_ == cap_) {
      // (args may refer to an element: build the new one before the elements move)
      T value(std::forward<Args>(args)...);
      reserve(2 * cap_);
      ::new (static_cast<void*>(data_ + size_)) T(std::move(value));
    } else {
      ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  void pop_back() { std::destroy_at(data_ + --size_); }
  void clear() {
    std::destroy(begin(), end());
    size_ = 0;
  }

  operator std::vector<T>() const { return {begin(), end()}; } // NOLINT: implicit, as a std::vector

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

private:
  T* data_ = reinterpret_cast<T*>(inline_);
  size_t size_ = 0;
  size_t cap_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];

  bool on_heap() const { return data_ != reinterpret_cast<const T*>(inline_); }
  void free_heap() {
    if (on_heap()) ::operator delete(data_, std::align_val_t(alignof(T)));
  }
  void release() {
    clear();
    free_heap();
    data_ = reinterpret_cast<T*>(inline_);
    cap_ = N;
  }
  // Moves o's elements here (this holds none), leaving o empty.
  void take(SmallVector& o) {
    if (o.on_heap()) {
      data_ = o.data_;
      cap_ = o.cap_;
      size_ = o.size_;
      o.data_ = reinterpret_cast<T*>(o.inline_);
      o.cap_ = N;
      o.size_ = 0;
      return;
    }
    data_ = reinterpret_cast<T*>(inline_);
    cap_ = N;
    std::uninitialized_move(o.begin(), o.end(), data_);
    size_ = o.size_;
    o.clear();
  }
};

} // namespace tiny
