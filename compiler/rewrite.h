#pragma once
// Pattern rewriting: the one mechanism every compiler pass is written in.
//
// A PatternMatcher is a list of rules, each for a set of ops. A rule looks at one node and returns
// its replacement, or nullptr when it does not apply. graph_rewrite applies a matcher bottom-up over
// a whole graph until no rule fires.

#include <array>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/uop.h"

namespace tiny {

using Rule = std::function<UOpPtr(const UOpPtr&)>;

class PatternMatcher {
public:
  struct Entry {
    std::vector<Ops> ops;
    Rule rule;
  };
  PatternMatcher(std::string name, std::initializer_list<Entry> entries);
  PatternMatcher(std::string name, std::vector<Entry> entries);
  // The first rule that applies to `n`, or nullptr.
  UOpPtr rewrite(const UOpPtr& n) const;
  const std::string& name() const { return name_; }
  PatternMatcher operator+(const PatternMatcher& other) const;

private:
  std::string name_;
  std::vector<Entry> entries_;
  std::array<std::vector<const Rule*>, static_cast<size_t>(Ops::SINK) + 1> by_op_;
  void index();
};

// Rewrites the graph below `root` with `pm`, sources first, until no rule fires.
UOpPtr graph_rewrite(const UOpPtr& root, const PatternMatcher& pm);

// Replaces nodes by the given map everywhere below root (sources rebuilt as needed).
UOpPtr substitute(const UOpPtr& root, const std::function<UOpPtr(const UOpPtr&)>& lookup);
// The same, the replacements a map from each node replaced.
UOpPtr substitute(const UOpPtr& root, const std::unordered_map<const UOp*, UOpPtr>& replace);

// Rebuilds `n` with new sources.
UOpPtr with_src(const UOpPtr& n, std::vector<UOpPtr> src);

// Constant folding and algebraic simplification of integer and boolean math (index expressions).
extern const PatternMatcher symbolic;

// An index expression as a sum of terms base * coef plus a constant (flatten_sum: ADD and MUL by a constant
// walked down to their other nodes, the bases).
struct Sum {
  std::vector<std::pair<UOpPtr, int64_t>> terms;
  int64_t constant = 0;
  void add(const UOpPtr& base, int64_t coef);
};
void flatten_sum(const UOpPtr& n, int64_t coef, Sum& out);

// a / b rounded toward negative infinity.
int64_t floor_div(int64_t a, int64_t b);

} // namespace tiny
