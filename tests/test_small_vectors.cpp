// Shape and SmallVector (compiler/shape.h, compiler/small_vector.h) against std::vector, inline and spilled to
// the heap; and the intern table's probing as nodes come and go.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/shape.h"
#include "compiler/small_vector.h"
#include "compiler/uop.h"

using namespace tiny;

namespace {
std::vector<int64_t> as_vector(const Shape& s) { return {s.begin(), s.end()}; }
} // namespace

TEST(Shape, EditsMatchStdVectorInlineAndSpilled) {
  std::mt19937 rng(7);
  Shape s;
  std::vector<int64_t> v;
  for (int step = 0; step < 2000; step++) {
    int64_t x = static_cast<int64_t>(rng() % 100);
    switch (rng() % 7) {
    case 0:
    case 1:
      s.push_back(x), v.push_back(x);
      break;
    case 2:
      if (!v.empty()) s.pop_back(), v.pop_back();
      break;
    case 3: {
      size_t at = v.empty() ? 0 : rng() % (v.size() + 1);
      s.insert(s.begin() + at, x), v.insert(v.begin() + static_cast<ptrdiff_t>(at), x);
      break;
    }
    case 4:
      if (!v.empty()) {
        size_t at = rng() % v.size();
        s.erase(s.begin() + at), v.erase(v.begin() + static_cast<ptrdiff_t>(at));
      }
      break;
    case 5: {
      size_t n = rng() % 12;
      s.resize(n, x), v.resize(n, x);
      break;
    }
    case 6: {
      // inserting a Shape's own values into itself
      Shape copy = s;
      s.insert(s.begin(), s.begin(), s.end());
      v.insert(v.begin(), copy.begin(), copy.end());
      if (v.size() > 40) s.clear(), v.clear();
      break;
    }
    }
    ASSERT_EQ(as_vector(s), v) << "step " << step;
  }
}

TEST(Shape, CopiesAndMovesKeepTheirValuesOnEitherSideOfTheInlineLimit) {
  for (size_t n : {size_t{0}, size_t{3}, Shape::kInline, Shape::kInline + 1, size_t{20}}) {
    Shape a(n, 5);
    for (size_t i = 0; i < n; i++)
      a[i] = static_cast<int64_t>(i);
    Shape b = a;
    EXPECT_EQ(b, a);
    Shape c = std::move(b);
    EXPECT_EQ(c, a);
    EXPECT_TRUE(b.empty());
    b = c;
    EXPECT_EQ(b, a);
    c = Shape{1, 2};
    EXPECT_EQ(as_vector(c), (std::vector<int64_t>{1, 2}));
    c = std::move(b);
    EXPECT_EQ(c, a);
    std::vector<int64_t> as_std = a;
    EXPECT_EQ(Shape(as_std), a);
  }
}

TEST(Shape, ComparesAsStdVectorDoes) {
  EXPECT_EQ(Shape({1, 2, 3}), Shape({1, 2, 3}));
  EXPECT_NE(Shape({1, 2, 3}), Shape({1, 2}));
  EXPECT_LT(Shape({1, 2}), Shape({1, 2, 3}));
  EXPECT_LT(Shape({1, 2, 3}), Shape({1, 3}));
  EXPECT_EQ(std::vector<int64_t>({4, 5}), Shape({4, 5}));
  EXPECT_EQ(Shape(3, 1), Shape({1, 1, 1}));
}

TEST(SmallVector, HoldsValuesWithOwnersInlineAndSpilled) {
  auto counted = std::make_shared<int>(0);
  {
    SmallVector<std::shared_ptr<int>, 2> v;
    for (int i = 0; i < 5; i++)
      v.push_back(counted);
    EXPECT_EQ(counted.use_count(), 6);
    SmallVector<std::shared_ptr<int>, 2> copy = v;
    EXPECT_EQ(counted.use_count(), 11);
    SmallVector<std::shared_ptr<int>, 2> moved = std::move(copy);
    EXPECT_EQ(counted.use_count(), 11);
    EXPECT_EQ(moved.size(), 5u);
    moved.pop_back();
    EXPECT_EQ(counted.use_count(), 10);
    // a one-element vector moves its inline element
    SmallVector<std::shared_ptr<int>, 2> one;
    one.emplace_back(counted);
    SmallVector<std::shared_ptr<int>, 2> one_moved = std::move(one);
    EXPECT_TRUE(one.empty());
    EXPECT_EQ(one_moved.size(), 1u);
    EXPECT_EQ(counted.use_count(), 11);
  }
  EXPECT_EQ(counted.use_count(), 1);
}

TEST(SmallVector, PushesAnElementOfItselfWhileGrowing) {
  SmallVector<std::string, 1> v{std::string(40, 'a')};
  for (int i = 0; i < 6; i++)
    v.push_back(v[0]);
  ASSERT_EQ(v.size(), 7u);
  for (const std::string& s : v)
    EXPECT_EQ(s, std::string(40, 'a'));
  std::vector<std::string> as_std = v;
  EXPECT_EQ(as_std.size(), 7u);
  EXPECT_TRUE(v == as_std);
}

TEST(InternTable, NodesStayFoundWhileOthersComeAndGo) {
  // Many nodes built and dropped in a shuffled order: every live one is found again by content (the table's
  // deletions must leave no node unreachable), and the table returns to its size.
  size_t before = live_uops();
  std::mt19937 rng(11);
  std::vector<UOpPtr> live;
  for (int i = 0; i < 20000; i++) {
    live.push_back(const_int(DType::Int64, 1000000 + i));
    if (rng() % 3 == 0) {
      size_t k = rng() % live.size();
      live[k] = live.back();
      live.pop_back();
    }
  }
  EXPECT_EQ(live_uops(), before + live.size());
  for (const UOpPtr& n : live)
    ASSERT_EQ(const_int(DType::Int64, n->const_i()).get(), n.get());
  live.clear();
  EXPECT_EQ(live_uops(), before);
}
