#include <gtest/gtest.h>

#include "compiler/rewrite.h"
#include "compiler/uop.h"

using namespace tiny;

TEST(UOp, BuildingTheSameNodeTwiceReturnsTheSameObject) {
  auto a = const_float(DType::Float32, 1.5);
  auto b = const_float(DType::Float32, 1.5);
  EXPECT_EQ(a.get(), b.get());
  auto x = view(a, ShapeTracker::from_shape({}).reshape({1}).expand({4}));
  auto s1 = alu(Ops::ADD, x, x);
  auto s2 = alu(Ops::ADD, x, x);
  EXPECT_EQ(s1.get(), s2.get());
  EXPECT_NE(alu(Ops::MUL, x, x).get(), s1.get());
}

TEST(UOp, NodesLeaveTheInternTableWhenTheyDie) {
  size_t before = live_uops();
  {
    auto c = const_int(DType::Int32, 123456789);
    auto n = alu(Ops::NEG, view(c, ShapeTracker::from_shape({}).reshape({1}).expand({7})));
    EXPECT_GT(live_uops(), before);
  }
  EXPECT_EQ(live_uops(), before);
}

TEST(UOp, NodesMadeCountsNewNodesOnly) {
  auto c = const_int(DType::Int32, 987654321);
  size_t made = uops_made();
  auto n = alu(Ops::NEG, c);
  EXPECT_EQ(uops_made(), made + 1);
  auto again = alu(Ops::NEG, c); // found, not made
  EXPECT_EQ(again.get(), n.get());
  EXPECT_EQ(uops_made(), made + 1);
  n.reset();
  again.reset();
  EXPECT_EQ(uops_made(), made + 1); // a node's death leaves the count as it is
}

// A walk of several roots with one shared set visits each node once, each root's new nodes in toposort's order
// (a schedule's key over a training step's parameter updates, which all read one backward graph).
TEST(UOp, ToposortOfRootsSharingNodesVisitsEachOnceInOrder) {
  auto x = view(const_float(DType::Float32, 2.0), ShapeTracker::from_shape({}).reshape({1}).expand({4}));
  auto shared = alu(Ops::MUL, alu(Ops::ADD, x, x), x);
  auto a = alu(Ops::NEG, shared), b = alu(Ops::SUB, shared, a);
  NodeSet seen;
  std::vector<UOpPtr> first = toposort(a, seen), second = toposort(b, seen), again = toposort(a, seen);
  EXPECT_EQ(first, toposort(a));
  EXPECT_EQ(second, std::vector<UOpPtr>{b}); // all of b's sources came with a
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(seen.size(), toposort(b).size());
}

TEST(UOp, ShapesAndDtypesAreDerived) {
  auto buf = std::make_shared<BufferBase>(DType::Float32, 12);
  auto b = buffer(buf);
  EXPECT_EQ(b->shape, Shape({12}));
  auto m = reshape(b, {3, 4});
  EXPECT_EQ(m->shape, Shape({3, 4}));
  auto t = view(m, ShapeTracker::from_shape({3, 4}).permute({1, 0}));
  EXPECT_EQ(t->shape, Shape({4, 3}));
  EXPECT_EQ(alu(Ops::CMPLT, t, t)->dtype, DType::Bool);
  EXPECT_THROW(alu(Ops::ADD, m, t), std::invalid_argument);
}

TEST(View, ViewsOfViewsComposeIntoOneTracker) {
  auto buf = std::make_shared<BufferBase>(DType::Float32, 24);
  auto b = buffer(buf);
  auto v = reshape(b, {2, 3, 4});
  auto p = view(v, ShapeTracker::from_shape({2, 3, 4}).permute({2, 0, 1}));
  ASSERT_EQ(p->op, Ops::VIEW);
  EXPECT_EQ(p->src[0], b);
  ASSERT_EQ(p->st().views.size(), 1u);
  EXPECT_EQ(p->st().views[0].strides, Shape({1, 12, 4}));
}

// A pad of a contiguous tensor is one view (its offset negative, its mask the padding), and a permute of a masked
// view is that view permuted, its mask too: F.pad(x).permute(0, 2, 3, 1) reads through one view, its padded
// channels-last copy by lanes (compiler/lower.cpp, lower_transposed_copy). A reshape of a masked view stays a view
// on top of it.
TEST(View, APaddedTensorPermutedIsOneMaskedView) {
  auto b = buffer(std::make_shared<BufferBase>(DType::Float32, 2 * 3 * 4 * 4));
  auto x = reshape(b, {2, 3, 4, 4});
  auto padded = pad(x, {{0, 0}, {0, 0}, {1, 1}, {1, 1}});
  ASSERT_EQ(padded->st().views.size(), 1u);
  EXPECT_EQ(padded->st().views[0].offset, -5);
  auto p = permute(padded, {0, 2, 3, 1});
  ASSERT_EQ(p->src[0], b);
  ASSERT_EQ(p->st().views.size(), 1u);
  const View& v = p->st().views[0];
  EXPECT_EQ(v.shape, Shape({2, 6, 6, 3}));
  EXPECT_EQ(v.strides, Shape({48, 4, 1, 16}));
  EXPECT_EQ(v.offset, -5);
  using Range = std::pair<int64_t, int64_t>;
  EXPECT_EQ(*v.mask, (std::vector<Range>{{0, 2}, {1, 5}, {1, 5}, {0, 3}}));
  EXPECT_EQ(reshape(p, {2 * 6 * 6 * 3})->st().views.size(), 2u);
}

TEST(View, ReshapeStridesFollowTorchViewRules) {
  EXPECT_EQ(*reshape_strides({4, 6}, {6, 1}, {2, 2, 6}), Shape({12, 6, 1}));
  EXPECT_EQ(*reshape_strides({4, 6}, {1, 4}, {4, 2, 3}), Shape({1, 12, 4}));
  EXPECT_FALSE(reshape_strides({4, 6}, {1, 4}, {24}).has_value());
}

TEST(Rewrite, APatternMatcherRewritesBottomUpToAFixedPoint) {
  // x * 1 -> x and x + 0 -> x as a two-rule matcher over float nodes
  PatternMatcher pm("identities", {
                                      {{Ops::MUL},
                                       [](const UOpPtr& n) -> UOpPtr {
                                         auto& c = n->src[1];
                                         return c->is_const() && c->const_f() == 1.0 ? n->src[0] : nullptr;
                                       }},
                                      {{Ops::ADD},
                                       [](const UOpPtr& n) -> UOpPtr {
                                         auto& c = n->src[1];
                                         return c->is_const() && c->const_f() == 0.0 ? n->src[0] : nullptr;
                                       }},
                                  });
  auto x = UOp::make(Ops::DEFINE_VAR, DType::Float32, {}, int64_t{0});
  auto e = UOp::make(
      Ops::ADD, DType::Float32,
      {UOp::make(Ops::MUL, DType::Float32, {x, const_float(DType::Float32, 1)}), const_float(DType::Float32, 0)});
  EXPECT_EQ(graph_rewrite(e, pm), x);
}

namespace {
UOpPtr range(int64_t end, int64_t axis) { return UOp::make(Ops::RANGE, kIndex, {idx_const(end)}, axis); }
UOpPtr idiv(const UOpPtr& a, int64_t c) { return UOp::make(Ops::IDIV, kIndex, {a, idx_const(c)}); }
UOpPtr imod(const UOpPtr& a, int64_t c) { return UOp::make(Ops::MOD, kIndex, {a, idx_const(c)}); }
UOpPtr add(const UOpPtr& a, const UOpPtr& b) { return UOp::make(Ops::ADD, kIndex, {a, b}); }
UOpPtr mul(const UOpPtr& a, int64_t c) { return UOp::make(Ops::MUL, kIndex, {a, idx_const(c)}); }
} // namespace

TEST(Symbolic, ConstantsFold) {
  auto e = add(mul(idx_const(3), 4), idx_const(5));
  EXPECT_EQ(graph_rewrite(e, symbolic), idx_const(17));
}

TEST(Symbolic, IndexMathOfALoopOfOneIterationIsItsOneValue) {
  auto r = range(1, 0), s = range(7, 1);
  EXPECT_EQ(graph_rewrite(mul(r, 2), symbolic), idx_const(0));
  EXPECT_EQ(graph_rewrite(add(add(mul(r, 2), s), idx_const(3)), symbolic),
            graph_rewrite(add(s, idx_const(3)), symbolic));
}

TEST(Symbolic, DivAndModOfInRangeValuesFold) {
  auto r = range(8, 0);
  EXPECT_EQ(graph_rewrite(idiv(r, 8), symbolic), idx_const(0));
  EXPECT_EQ(graph_rewrite(imod(r, 8), symbolic), r);
}

TEST(Symbolic, AlignedTermsLeaveTheDivision) {
  auto r0 = range(5, 0), r1 = range(4, 1);
  auto flat = add(mul(r0, 4), r1); // r0*4 + r1, r1 < 4
  EXPECT_EQ(graph_rewrite(idiv(flat, 4), symbolic), r0);
  EXPECT_EQ(graph_rewrite(imod(flat, 4), symbolic), r1);
}

TEST(Symbolic, AFlatIndexDividedByAMultipleOfItsRowKeepsTheRowDigitAlone) {
  // (r0*784 + r1*28 + r2) / 25088 with r1*28 + r2 < 784 = 25088 / 32: r0 / 32, no division of the columns
  // (a max pool's backward over (128, 32, 28, 28) read its (128, 32, 14, 14) indices so)
  auto r0 = range(4096, 0), r1 = range(28, 1), r2 = range(28, 2);
  auto flat = add(add(mul(r0, 784), mul(r1, 28)), r2);
  EXPECT_EQ(graph_rewrite(idiv(flat, 25088), symbolic), idiv(r0, 32));
  EXPECT_EQ(graph_rewrite(idiv(add(mul(r1, 28), r2), 56), symbolic), idiv(r1, 2));
  // the remainder keeps the low digits whole: (r0 % 32) * 784 + r1*28 + r2
  EXPECT_EQ(graph_rewrite(imod(flat, 25088), symbolic),
            graph_rewrite(add(add(mul(imod(r0, 32), 784), mul(r1, 28)), r2), symbolic));
  // a low part that can reach the factor does not split: r1*28 + r2 + 4 spans 0..787 >= 784
  auto shifted = add(flat, idx_const(4));
  EXPECT_EQ(graph_rewrite(idiv(shifted, 25088), symbolic)->op, Ops::IDIV);
  EXPECT_EQ(graph_rewrite(idiv(shifted, 25088), symbolic)->src[1], idx_const(25088));
}

TEST(Symbolic, SplitDigitsRecombine) {
  // (g / 4) * 4 + g % 4 == g, and ((g / 4) % 3) * 4 + g % 4 == g % 12: a reshape round trip
  auto g = range(1000, 0);
  EXPECT_EQ(graph_rewrite(add(mul(idiv(g, 4), 4), imod(g, 4)), symbolic), g);
  auto e = add(mul(imod(idiv(g, 4), 3), 4), imod(g, 4));
  EXPECT_EQ(graph_rewrite(e, symbolic), imod(g, 12));
}

TEST(Symbolic, TheDigitsOfALaneOfAFlattenRecombine) {
  // Lane 7 of 16 lanes over a (64, 7, 7) flatten: x = r*16 + 7 split into the digits of (64, 7, 7) and put
  // back together, after the simplifier has taken the 7 out of x / 7 (x / 7 = r*16 / 7 + 1) and x % 7
  // (= r*16 % 7): x again, so the lanes read contiguously (a linear layer's weight gradient over a pooled
  // activation read each lane alone).
  auto r = range(196, 0);
  auto x = add(mul(r, 16), idx_const(7));
  auto digits = add(add(mul(idiv(x, 49), 49), mul(imod(idiv(x, 7), 7), 7)), imod(x, 7));
  EXPECT_EQ(graph_rewrite(digits, symbolic), graph_rewrite(x, symbolic));
}

TEST(Symbolic, DigitsOfAPossiblyNegativeIndexRecombine) {
  // A padded read's flat index (it goes below 0 where the mask hides it) split into the digits of a
  // (2, 3, 4) buffer and put back together: C's truncating / and % recombine for any sign.
  auto x = add(range(30, 0), idx_const(-5));
  auto digits = add(add(mul(idiv(x, 12), 12), mul(imod(idiv(x, 4), 3), 4)), imod(idiv(x, 1), 4));
  EXPECT_EQ(graph_rewrite(digits, symbolic), graph_rewrite(x, symbolic));
}

TEST(UOp, AUint64ConstantAboveInt64MaxHasNoSignedBounds) {
  auto c = const_int(DType::UInt64, -1); // 2**64 - 1
  EXPECT_EQ(c->vmin, INT64_MIN);
  EXPECT_EQ(c->vmax, INT64_MAX);
  EXPECT_EQ(const_int(DType::UInt32, 4294967295)->vmin, 4294967295);
}
