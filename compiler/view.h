#pragma once
// Views: how a shaped read maps onto the row-major flattening of its source.
//
// A View {shape, strides, offset, mask} maps an index i over `shape` to the flat element
// offset + sum(i[d] * strides[d]) of its source, read as a row-major array; where `mask` is set and
// i lies outside it, the read is 0. A ShapeTracker is a stack of views, applied innermost first:
// views[0] reads the source, views[k] reads the row-major flattening of views[k-1]'s shape. Every
// movement (reshape, permute, expand, as_strided...) is a change to the top view, or a new view
// when the top one cannot express it.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/shape.h"
#include "compiler/small_vector.h"

namespace tiny {

int64_t prod(const Shape& s);
Shape contiguous_strides(const Shape& shape);

struct View {
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  std::optional<std::vector<std::pair<int64_t, int64_t>>> mask; // [begin, end) per dim

  static View contiguous(const Shape& shape);
  bool is_contiguous() const; // row-major, offset 0, no mask
  bool operator==(const View&) const = default;
  size_t hash() const;
  std::string str() const;
};

class ShapeTracker {
public:
  SmallVector<View, 1> views; // nearly always one: no allocation for it

  static ShapeTracker from_shape(const Shape& shape);
  // The tracker of the one view `v`, moved in (a braced list, ShapeTracker{{v}}, copies it).
  static ShapeTracker of(View v);
  const Shape& shape() const { return views.back().shape; }
  bool is_contiguous() const { return views.size() == 1 && views[0].is_contiguous(); }

  // Movement: each returns the tracker with one more movement applied.
  ShapeTracker as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  ShapeTracker reshape(const Shape& shape) const;
  ShapeTracker permute(const std::vector<int64_t>& order) const;
  ShapeTracker expand(const Shape& shape) const;
  // Pads each dim with (before, after) elements that read as 0 (a mask).
  ShapeTracker pad(const std::vector<std::pair<int64_t, int64_t>>& pads) const;
  // Keeps [begin, end) of each dim.
  ShapeTracker shrink(const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  ShapeTracker flip(const std::vector<bool>& axes) const;
  // Reading `this` after reading through `inner`: `inner`'s shape is this tracker's source.
  ShapeTracker on_top_of(const ShapeTracker& inner) const;

  bool operator==(const ShapeTracker&) const = default;
  size_t hash() const;
  std::string str() const;

private:
  ShapeTracker push(View v) const;
};

// Strides that let a view of `old_shape`/`old_strides` be read as `new_shape` without a copy, when
// they exist (torch's rule for Tensor.view).
std::optional<Shape> reshape_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape);

} // namespace tiny
