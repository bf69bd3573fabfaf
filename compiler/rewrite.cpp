#include "compiler/rewrite.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <vector>

namespace tiny {

PatternMatcher::PatternMatcher(std::string name, std::initializer_list<Entry> entries)
    : name_(std::move(name)), entries_(entries) {
  index();
}

PatternMatcher::PatternMatcher(std::string name, std::vector<Entry> entries)
    : name_(std::move(name)), entries_(std::move(entries)) {
  index();
}

void PatternMatcher::index() {
  for (auto& list : by_op_)
    list.clear();
  for (const Entry& e : entries_)
    for (Ops op : e.ops)
      by_op_[static_cast<size_t>(op)].push_back(&e.rule);
}

UOpPtr PatternMatcher::rewrite(const UOpPtr& n) const {
  for (const Rule* r : by_op_[static_cast<size_t>(n->op)])
    if (UOpPtr out = (*r)(n); out && out != n) return out;
  return nullptr;
}

PatternMatcher PatternMatcher::operator+(const PatternMatcher& other) const {
  std::vector<Entry> all = entries_;
  all.insert(all.end(), other.entries_.begin(), other.entries_.end());
  return PatternMatcher(name_ + "+" + other.name_, std::move(all));
}

UOpPtr with_src(const UOpPtr& n, std::vector<UOpPtr> src) {
  if (src == n->src) return n;
  // a view over a new view composes into one (a realized value read through a view: masked
  // reads then load guarded)
  if (n->op == Ops::VIEW) return view(src[0], n->st());
  return UOp::make(n->op, n->dtype, std::move(src), n->arg);
}

namespace {

// Iterative post-order rewrite; `step` maps a node whose sources are final to its replacement
// (nullptr: keep). A replacement is itself rewritten fully.
UOpPtr rewrite_graph(const UOpPtr& root, const std::function<UOpPtr(const UOpPtr&)>& step) {
  struct Frame {
    UOpPtr n;
    int stage = 0;
    UOpPtr replacement;
  };
  std::unordered_map<const UOp*, std::pair<UOpPtr, UOpPtr>> done; // node -> (node kept alive, result)
  std::vector<Frame> stack{{root, 0, nullptr}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (done.count(f.n.get())) {
      stack.pop_back();
      continue;
    }
    if (f.stage == 0) {
      f.stage = 1;
      UOpPtr n = f.n;
      for (const UOpPtr& s : n->src)
        if (!done.count(s.get())) stack.push_back({s, 0, nullptr});
      continue;
    }
    if (f.stage == 1) {
      std::vector<UOpPtr> src;
      src.reserve(f.n->src.size());
      for (const UOpPtr& s : f.n->src)
        src.push_back(done.at(s.get()).second);
      UOpPtr rebuilt = with_src(f.n, std::move(src));
      UOpPtr r = step(rebuilt);
      if (!r) {
        done[f.n.get()] = {f.n, rebuilt};
        if (rebuilt != f.n) done[rebuilt.get()] = {rebuilt, rebuilt};
        stack.pop_back();
        continue;
      }
      if (auto it = done.find(r.get()); it != done.end()) {
        done[f.n.get()] = {f.n, it->second.second};
        stack.pop_back();
        continue;
      }
      f.stage = 2;
      f.replacement = r;
      stack.push_back({r, 0, nullptr});
      continue;
    }
    UOpPtr result = done.at(f.replacement.get()).second;
    done[f.n.get()] = {f.n, result};
    stack.pop_back();
  }
  return done.at(root.get()).second;
}

} // namespace

UOpPtr graph_rewrite(const UOpPtr& root, const PatternMatcher& pm) {
  return rewrite_graph(root, [&](const UOpPtr& n) { return pm.rewrite(n); });
}

UOpPtr substitute(const UOpPtr& root, const std::function<UOpPtr(const UOpPtr&)>& lookup) {
  // Replacements are final: a substituted node is not searched again. A node rebuilt over new sources is
  // looked up once more.
  std::unordered_map<const UOp*, std::pair<UOpPtr, UOpPtr>> done;
  std::vector<std::pair<UOpPtr, bool>> stack{{root, false}};
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    if (done.count(n.get())) {
      stack.pop_back();
      continue;
    }
    if (UOpPtr r = lookup(n)) {
      done[n.get()] = {n, r};
      stack.pop_back();
      continue;
    }
    if (!expanded) {
      stack.back().second = true;
      for (const UOpPtr& s : n->src)
        if (!done.count(s.get())) stack.push_back({s, false});
      continue;
    }
    std::vector<UOpPtr> src;
    for (const UOpPtr& s : n->src)
      src.push_back(done.at(s.get()).second);
    // A node rebuilt over new sources can be one the lookup replaces (hash-consing makes it the
    // same node as one met elsewhere, e.g. a realized reduction over a source that was copied).
    UOpPtr rebuilt = with_src(n, std::move(src));
    UOpPtr r = rebuilt == n ? nullptr : lookup(rebuilt);
    done[n.get()] = {n, r ? r : rebuilt};
    stack.pop_back();
  }
  return done.at(root.get()).second;
}

UOpPtr substitute(const UOpPtr& root, const std::unordered_map<const UOp*, UOpPtr>& replace) {
  return substitute(root, [&](const UOpPtr& n) -> UOpPtr {
    auto it = replace.find(n.get());
    return it == replace.end() ? nullptr : it->second;
  });
}

// ---- symbolic ----

namespace {

bool is_c(const UOpPtr& n) { return n->op == Ops::CONST; }
bool is_c(const UOpPtr& n, int64_t v) { return n->op == Ops::CONST && n->const_i() == v; }
bool index_math(const UOpPtr& n) { return n->dtype == kIndex && n->shape.empty(); }

} // namespace

void Sum::add(const UOpPtr& base, int64_t coef) {
  for (auto& t : terms)
    if (t.first == base) {
      t.second += coef;
      return;
    }
  terms.emplace_back(base, coef);
}

void flatten_sum(const UOpPtr& n, int64_t coef, Sum& out) {
  if (n->op == Ops::ADD && index_math(n)) {
    flatten_sum(n->src[0], coef, out);
    flatten_sum(n->src[1], coef, out);
  } else if (is_c(n)) {
    out.constant += coef * n->const_i();
  } else if (n->op == Ops::MUL && is_c(n->src[1])) {
    flatten_sum(n->src[0], coef * n->src[1]->const_i(), out);
  } else {
    out.add(n, coef);
  }
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

namespace {

UOpPtr fold_const(const UOpPtr& n) {
  // index math whose bounds leave one value (a product with a loop of one iteration): that value, so that
  // equal indices are equal nodes and nothing names a loop it does not need
  if (index_math(n) && is_alu(n->op) && n->vmin == n->vmax) return idx_const(n->vmin);
  if (n->op == Ops::WHERE && is_c(n->src[0])) return n->src[0]->const_i() ? n->src[1] : n->src[2];
  if (n->dtype != kIndex && n->dtype != DType::Bool) return nullptr;
  for (const UOpPtr& s : n->src)
    if (!is_c(s) || (s->dtype != kIndex && s->dtype != DType::Bool)) return nullptr;
  if (n->op == Ops::WHERE) return n->src[0]->const_i() ? n->src[1] : n->src[2];
  if (n->src.size() != 2) return nullptr;
  int64_t a = n->src[0]->const_i(), b = n->src[1]->const_i(), r;
  switch (n->op) {
  case Ops::ADD:
    r = a + b;
    break;
  case Ops::SUB:
    r = a - b;
    break;
  case Ops::MUL:
    r = a * b;
    break;
  case Ops::IDIV:
    if (b == 0) return nullptr;
    r = a / b;
    break;
  case Ops::MOD:
    if (b == 0) return nullptr;
    r = a % b;
    break;
  case Ops::MAX:
    r = std::max(a, b);
    break;
  case Ops::MIN:
    r = std::min(a, b);
    break;
  case Ops::CMPLT:
    r = a < b;
    break;
  case Ops::CMPLE:
    r = a <= b;
    break;
  case Ops::CMPEQ:
    r = a == b;
    break;
  case Ops::CMPNE:
    r = a != b;
    break;
  case Ops::AND:
    r = a & b;
    break;
  case Ops::OR:
    r = a | b;
    break;
  case Ops::XOR:
    r = a ^ b;
    break;
  default:
    return nullptr;
  }
  return const_int(n->dtype, r);
}

UOpPtr build_sum(const Sum& s) {
  UOpPtr acc;
  for (const auto& [base, coef] : s.terms) {
    if (coef == 0) continue;
    UOpPtr t = coef == 1 ? base : UOp::make(Ops::MUL, kIndex, {base, idx_const(coef)});
    acc = acc ? UOp::make(Ops::ADD, kIndex, {acc, t}) : t;
  }
  if (!acc) return idx_const(s.constant);
  if (s.constant != 0) acc = UOp::make(Ops::ADD, kIndex, {acc, idx_const(s.constant)});
  return acc;
}

// m when hi is ((x / c + m) % d) with m > 0 and x >= 0: the digit (x + m*c) / c % d, after the simplifier
// took the m*c out of the division (x + m*c) / c; its low digit (x + m*c) % c is x % c. 0 otherwise.
int64_t offset_digit(const UOpPtr& hi, const UOpPtr& x, int64_t c) {
  if (hi->op != Ops::MOD || !is_c(hi->src[1]) || x->vmin < 0) return 0;
  const UOpPtr& a = hi->src[0];
  if (a->op != Ops::ADD || !is_c(a->src[1]) || a->src[1]->const_i() <= 0) return 0;
  const UOpPtr& q = a->src[0];
  if (q->op != Ops::IDIV || q->src[0] != x || !is_c(q->src[1], c)) return 0;
  return a->src[1]->const_i();
}

// (x / c) * c*k + (x % c) * k  ->  x * k, and ((x / c) % d) * c*k + (x % c) * k  ->  (x % (c*d)) * k, and
// ((x / c + m) % d) * c*k + (x % c) * k  ->  ((x + m*c) % (c*d)) * k: an index split into digits and put
// back together (the last: a lane m*c + l of x's digits, its division simplified first).
bool recombine_digits(Sum& s) {
  for (size_t i = 0; i < s.terms.size(); i++) {
    auto [mod, k] = s.terms[i];
    if (mod->op != Ops::MOD || !is_c(mod->src[1]) || k == 0) continue;
    const UOpPtr& x = mod->src[0];
    int64_t c = mod->src[1]->const_i();
    for (size_t j = 0; j < s.terms.size(); j++) {
      auto [hi, k2] = s.terms[j];
      if (j == i || k2 != c * k) continue;
      UOpPtr merged;
      if (hi->op == Ops::IDIV && hi->src[0] == x && is_c(hi->src[1], c))
        merged = x;
      else if (hi->op == Ops::MOD && is_c(hi->src[1]) && hi->src[0]->op == Ops::IDIV && hi->src[0]->src[0] == x &&
               is_c(hi->src[0]->src[1], c))
        merged = UOp::make(Ops::MOD, kIndex, {x, idx_const(c * hi->src[1]->const_i())});
      else if (int64_t m = offset_digit(hi, x, c); m > 0)
        merged = UOp::make(Ops::MOD, kIndex, {x + idx_const(m * c), idx_const(c * hi->src[1]->const_i())});
      if (!merged) continue;
      s.terms[i].second = 0;
      s.terms[j].second = 0;
      s.add(merged, k);
      return true;
    }
  }
  return false;
}

UOpPtr simplify_add(const UOpPtr& n) {
  if (!index_math(n)) return nullptr;
  Sum s;
  flatten_sum(n, 1, s);
  while (recombine_digits(s)) {
  }
  UOpPtr out = build_sum(s);
  return out == n ? nullptr : out;
}

UOpPtr simplify_mul(const UOpPtr& n) {
  if (!index_math(n)) return nullptr;
  const UOpPtr &a = n->src[0], &b = n->src[1];
  if (is_c(a) && !is_c(b)) return UOp::make(Ops::MUL, kIndex, {b, a});
  if (!is_c(b)) return nullptr;
  int64_t c = b->const_i();
  if (c == 1) return a;
  if (c == 0) return idx_const(0);
  if (a->op == Ops::MUL && is_c(a->src[1]))
    return UOp::make(Ops::MUL, kIndex, {a->src[0], idx_const(a->src[1]->const_i() * c)});
  if (a->op == Ops::ADD) return simplify_add(UOp::make(Ops::ADD, kIndex, {a->src[0] * b, a->src[1] * b}));
  return nullptr;
}

// x / c and x % c for x = g*y + z >= 0 with g dividing c and 0 <= z < g: x / c = y / (c/g) and
// x % c = (y % (c/g))*g + z, for the largest such g among the gcds of c and the terms' coefficients (a flat
// index over a row and its columns, divided by a multiple of the row's length: the row's digit alone).
// y >= 0 follows from x >= 0. nullptr when no g > 1 splits x so.
UOpPtr divmod_by_common_factor(const Sum& s, int64_t c, bool div) {
  std::vector<int64_t> candidates;
  for (const auto& [base, coef] : s.terms)
    if (int64_t g = std::gcd(coef, c); g > 1) candidates.push_back(g);
  std::sort(candidates.rbegin(), candidates.rend());
  for (int64_t g : candidates) {
    Sum y, z;
    for (const auto& [base, coef] : s.terms) {
      if (coef % g == 0)
        y.add(base, coef / g);
      else
        z.add(base, coef);
    }
    y.constant = floor_div(s.constant, g);
    z.constant = s.constant - y.constant * g;
    UOpPtr low = build_sum(z);
    if (low->vmin < 0 || low->vmax >= g) continue;
    UOpPtr high = build_sum(y);
    int64_t k = c / g;
    if (div) return k == 1 ? high : UOp::make(Ops::IDIV, kIndex, {high, idx_const(k)});
    UOpPtr digit = k == 1 ? idx_const(0) : UOp::make(Ops::MOD, kIndex, {high, idx_const(k)});
    return UOp::make(Ops::ADD, kIndex, {UOp::make(Ops::MUL, kIndex, {digit, idx_const(g)}), low});
  }
  return nullptr;
}

// x / c and x % c for x >= 0 and c > 0: terms that are multiples of c leave the division whole.
UOpPtr simplify_divmod(const UOpPtr& n) {
  if (!index_math(n)) return nullptr;
  const UOpPtr &x = n->src[0], &d = n->src[1];
  if (!is_c(d) || d->const_i() <= 0) return nullptr;
  int64_t c = d->const_i();
  bool div = n->op == Ops::IDIV;
  if (c == 1) return div ? x : idx_const(0); // whatever the sign
  if (x->vmin < 0) return nullptr;
  if (x->vmax < c) return div ? idx_const(0) : x;
  if (div && x->op == Ops::IDIV && is_c(x->src[1]) && x->src[1]->const_i() > 0)
    return UOp::make(Ops::IDIV, kIndex, {x->src[0], idx_const(x->src[1]->const_i() * c)});
  if (!div && x->op == Ops::MOD && is_c(x->src[1]) && x->src[1]->const_i() % c == 0)
    return UOp::make(Ops::MOD, kIndex, {x->src[0], d});
  Sum s;
  flatten_sum(x, 1, s);
  Sum whole, rest;
  for (auto& [base, coef] : s.terms) {
    if (coef % c == 0)
      whole.add(base, coef / c);
    else
      rest.add(base, coef);
  }
  whole.constant = s.constant / c * (s.constant >= 0 ? 1 : 0);
  rest.constant = s.constant - whole.constant * c;
  if (whole.terms.empty() && whole.constant == 0) return divmod_by_common_factor(s, c, div);
  for (auto& [base, coef] : whole.terms)
    if (base->vmin < 0) return nullptr;
  UOpPtr r = build_sum(rest);
  if (r->vmin < 0) return nullptr;
  if (div) return build_sum(whole) + UOp::make(Ops::IDIV, kIndex, {r, d});
  return UOp::make(Ops::MOD, kIndex, {r, d});
}

UOpPtr simplify_cmp(const UOpPtr& n) {
  const UOpPtr &a = n->src[0], &b = n->src[1];
  if (a->dtype != kIndex || !is_c(b)) return nullptr;
  int64_t c = b->const_i();
  if (n->op == Ops::CMPLT) {
    if (a->vmax < c) return const_int(DType::Bool, 1);
    if (a->vmin >= c) return const_int(DType::Bool, 0);
  }
  return nullptr;
}

UOpPtr simplify_logic(const UOpPtr& n) {
  if (n->dtype != DType::Bool) return nullptr;
  const UOpPtr &a = n->src[0], &b = n->src[1];
  bool is_and = n->op == Ops::AND;
  for (int i = 0; i < 2; i++) {
    const UOpPtr& c = i ? a : b;
    const UOpPtr& other = i ? b : a;
    if (!is_c(c)) continue;
    if (c->const_i() != 0) return is_and ? other : c;
    return is_and ? c : other;
  }
  return nullptr;
}

} // namespace

const PatternMatcher symbolic("symbolic",
                              {
                                  {{Ops::ADD, Ops::SUB, Ops::MUL, Ops::IDIV, Ops::MOD, Ops::MAX, Ops::MIN, Ops::CMPLT,
                                    Ops::CMPLE, Ops::CMPEQ, Ops::CMPNE, Ops::AND, Ops::OR, Ops::XOR, Ops::WHERE},
                                   fold_const},
                                  {{Ops::ADD}, simplify_add},
                                  {{Ops::MUL}, simplify_mul},
                                  {{Ops::IDIV, Ops::MOD}, simplify_divmod},
                                  {{Ops::CMPLT}, simplify_cmp},
                                  {{Ops::AND, Ops::OR}, simplify_logic},
                              });

} // namespace tiny
