#pragma once
// Where compiled programs are kept between processes, and the content hash that names them.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tiny::runtime {

// $TINY_CACHE_DIR, default ~/.cache/tiny (also when it is set but empty, as for XDG's variables).
inline std::filesystem::path cache_dir() {
  if (const char* d = std::getenv("TINY_CACHE_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "/tmp") / ".cache" / "tiny";
}

// FNV-1a of s as 16 hex digits.
inline std::string content_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

} // namespace tiny::runtime
