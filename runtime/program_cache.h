#pragma once
// A device's loaded programs by source: at most TINY_MAX_PROGRAMS, the least recently used dropped (a
// cached schedule holding one keeps it alive until the schedule goes).

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace tiny::runtime {

class ProgramCache {
public:
  // The program cached under `key`, or the one `make()` returns, cached (make counts its own compiles).
  template <class Make> std::shared_ptr<Program> get(const std::string& key, Make make) {
    std::lock_guard lock(mu_);
    if (auto it = programs_.find(key); it != programs_.end()) {
      stats().cache_hits++;
      recent_.splice(recent_.begin(), recent_, it->second.recent);
      return it->second.program;
    }
    std::shared_ptr<Program> p = make();
    recent_.push_front(key);
    programs_.emplace(key, Cached{p, recent_.begin()});
    while (static_cast<int64_t>(programs_.size()) > max_programs_) {
      programs_.erase(recent_.back());
      recent_.pop_back();
    }
    return p;
  }
  bool contains(const std::string& key) {
    std::lock_guard lock(mu_);
    return programs_.count(key) != 0;
  }
  void clear() {
    std::lock_guard lock(mu_);
    programs_.clear();
    recent_.clear();
  }

private:
  struct Cached {
    std::shared_ptr<Program> program;
    std::list<std::string>::iterator recent; // its place in recent_
  };
  std::mutex mu_;
  std::unordered_map<std::string, Cached> programs_;
  std::list<std::string> recent_; // keys, most recently used first
  int64_t max_programs_ = env_limit("TINY_MAX_PROGRAMS", 2048);
};

} // namespace tiny::runtime
