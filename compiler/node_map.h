#pragma once
// NodeMap<V>: a map from node addresses to V in one array (open addressing, linear probing), and NodeSet, the
// set of them. A walk of a graph (toposort, the schedule cache's key of a training step's graph: tens of thousands
// of nodes a sync) marks every node it visits; std::unordered_set allocated a list node per insert, and those
// allocations and their frees were a tenth of the host's time in a ShuffleNet step (issue #13).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tiny {

template <class V> class NodeMap {
public:
  // The value at `key` and whether it was inserted now (else the one there is kept).
  std::pair<V*, bool> try_emplace(const void* key, V value = V{}) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    size_t i = home(key);
    for (; slots_[i].key; i = (i + 1) & mask())
      if (slots_[i].key == key) return {&slots_[i].value, false};
    slots_[i] = Slot{key, std::move(value)};
    count_++;
    return {&slots_[i].value, true};
  }
  // The value at `key`, or null.
  V* find(const void* key) {
    if (slots_.empty()) return nullptr;
    for (size_t i = home(key); slots_[i].key; i = (i + 1) & mask())
      if (slots_[i].key == key) return &slots_[i].value;
    return nullptr;
  }
  bool contains(const void* key) { return find(key) != nullptr; }
  size_t size() const { return count_; }

private:
  struct Slot {
    const void* key = nullptr;
    V value{};
  };
  std::vector<Slot> slots_;
  size_t count_ = 0;

  size_t mask() const { return slots_.size() - 1; }
  size_t home(const void* key) const {
    uint64_t h = reinterpret_cast<uintptr_t>(key) * 0x9e3779b97f4a7c15ULL; // nodes are 16-byte aligned: mix
    return static_cast<size_t>(h >> 20) & mask();
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
    for (Slot& s : old)
      if (s.key) {
        size_t i = home(s.key);
        while (slots_[i].key)
          i = (i + 1) & mask();
        slots_[i] = std::move(s);
      }
  }
};

// A set of nodes: insert returns whether the node was new.
class NodeSet {
public:
  bool insert(const void* key) { return map_.try_emplace(key).second; }
  bool contains(const void* key) { return map_.contains(key); }
  size_t size() const { return map_.size(); }

private:
  struct Empty {};
  NodeMap<Empty> map_;
};

} // namespace tiny
