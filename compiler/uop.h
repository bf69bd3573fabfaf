#pragma once
// The UOp graph: immutable, hash-consed nodes (op, dtype, src, arg).
//
// Building the same node twice returns the same object, so equality is pointer equality and common
// subexpressions are shared. Nodes are reference counted and leave the intern table when they die.
// Tensor-level nodes carry a shape (derived from op, src and arg; not part of the identity).

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

#include "compiler/dtype.h"
#include "compiler/node_map.h"
#include "compiler/small_vector.h"
#include "compiler/view.h"

namespace tiny {

enum class Ops : uint8_t {
  // Tensor-level leaves
  BUFFER,     // a device buffer, by identity; 1-D of its element count
  CONST,      // a scalar constant (shape ()), broadcast by VIEW
  DEFINE_VAR, // a runtime scalar (a value from Python); arg = its value, passed to kernels at launch
  IOTA,       // 0, 1, ..., n-1 (1-D, arg = n): the index itself, for arange, masks and one-hot
  // Movement
  VIEW, // arg = ShapeTracker over src[0]
  // Unary ALU
  NEG,
  NOT,
  BITNOT,
  ABS,
  SQRT,
  EXP,
  EXP2,
  LOG,
  LOG2,
  SIN,
  COS,
  TAN,
  TANH,
  ERF,
  FLOOR,
  CEIL,
  RINT,
  TRUNC,
  RECIP,
  LOG1P,
  EXPM1,
  ASIN,
  ACOS,
  ATAN,
  SINH,
  COSH,
  ASINH,
  ACOSH,
  ATANH,
  ERFC,
  LGAMMA,
  // Binary ALU
  ADD,
  SUB,
  MUL,
  FDIV,
  IDIV,
  MOD,
  POW,
  ATAN2,
  MAX,
  MIN,
  CMPLT,
  CMPLE,
  CMPEQ,
  CMPNE,
  AND,
  OR,
  XOR,
  SHL,
  SHR,
  // Ternary ALU
  WHERE,
  CAST,
  BITCAST,
  // Reduce over axes: arg = ReduceArg; the result keeps the reduced axes with size 1. After
  // lowering, src = (value, loop ranges...) and the node is the accumulated value.
  REDUCE,
  // A realize boundary: its value is computed into a buffer of its own.
  CONTIGUOUS,
  // Buffer content: src = (base, value); arg = the View of base that value overwrites
  ASSIGN,
  // A data-dependent read: src = (data (1-D), index (int64, any shape)); result[i] = data[index[i]],
  // 0 where the index is out of range.
  GATHER,
  // Buffer content with data-dependent writes: src = (base (1-D), index, value (index's shape));
  // base[index[i]] = value[i] in order, or combined with the old value when arg is a binary op
  // (ADD, MUL, MAX, MIN as int64); -1 replaces. Out-of-range indices are skipped.
  SCATTER,
  // A 3 x 3 convolution by Winograd's F(2 x 2, 3 x 3), realized by a kernel of its own (compiler/winograd.h):
  // src = (x (N, 2 Ty + 2, 2 Tx + 2, C), the input padded and channels-last; u (16, C, K), the filters transformed);
  // the result is (N, K, H, W), H <= 2 Ty and W <= 2 Tx, arg = a contiguous View of that shape.
  WINOGRAD,
  // The filter gradient of such a convolution by Winograd's F(3 x 3, 2 x 2), in the transformed domain: src = (x as
  // WINOGRAD's, g (N, 2 Ty + 2 qy, 2 Tx + 2 qx, K), the output's gradient channels-last at offset (qy, qx), zero past
  // its H x W: the input gradient's padded copy); the result is (P, 16, K, C), the sums of the transformed products
  // over P chunks of the images, arg = a contiguous View of that shape.
  WINOGRAD_FILTER_GRAD,
  // Kernel-level, after lowering
  PARAM, // a kernel buffer argument; arg = slot
  ARG,   // a kernel scalar argument; arg = slot in the int64 or the double arguments
  RANGE, // a loop variable; src = (end); arg = axis
  LOAD,  // src = (param, index[, valid])
  STORE, // src = (param, index, value)
  // GPU: a tile of a buffer the work-group's threads copy into local memory together, between barriers,
  // for a reduction to read (LOAD with the STAGE as its buffer). src = (fill, param, index[, valid]):
  // element `fill` (a RANGE over the tile, arg = its size) is param[index], or 0 where valid is false.
  STAGE,
  SINK, // groups the stores of one kernel
};

const char* op_name(Ops op);
bool is_unary(Ops op);
bool is_binary(Ops op);
bool is_alu(Ops op);
bool is_comparison(Ops op);

// A device buffer as the compiler sees it: an identity with an element type and count. The runtime
// derives its real buffers from this.
struct BufferBase {
  DType dtype;
  int64_t numel;
  BufferBase(DType d, int64_t n) : dtype(d), numel(n) {}
  virtual ~BufferBase() = default;
};
using BufferRef = std::shared_ptr<BufferBase>;

struct ReduceArg {
  Ops op; // ADD, MUL, MAX or MIN
  std::vector<int64_t> axes;
  bool operator==(const ReduceArg&) const = default;
};

using Arg = std::variant<std::monostate, int64_t, double, ShapeTracker, View, BufferRef, ReduceArg>;

class UOp;
using UOpPtr = std::shared_ptr<const UOp>;

class UOp : public std::enable_shared_from_this<UOp> {
public:
  const Ops op;
  const DType dtype;
  const SmallVector<UOpPtr, 3> src;
  const Arg arg;
  const Shape shape; // derived; () for scalars and kernel-level nodes
  // Bounds of integer-valued nodes (index math), derived from the sources; full range when unknown.
  const int64_t vmin, vmax;

  static UOpPtr make(Ops op, DType dtype, std::initializer_list<UOpPtr> src = {}, Arg arg = {});
  static UOpPtr make(Ops op, DType dtype, const std::vector<UOpPtr>& src, Arg arg = {});
  static UOpPtr make(Ops op, DType dtype, const SmallVector<UOpPtr, 3>& src, Arg arg = {});
  ~UOp();

  const ShapeTracker& st() const { return std::get<ShapeTracker>(arg); }
  const ReduceArg& reduce_arg() const { return std::get<ReduceArg>(arg); }
  const BufferRef& buffer() const { return std::get<BufferRef>(arg); }
  // CONST values: ints and bools are int64_t, floats are double.
  bool is_const() const { return op == Ops::CONST; }
  double const_f() const;
  int64_t const_i() const;
  std::string str() const;      // one node
  std::string tree_str() const; // the graph below, for debugging
  size_t hash() const { return hash_; }

  UOp(Ops op, DType dtype, std::span<const UOpPtr> src, Arg arg, Shape shape, size_t hash,
      std::pair<int64_t, int64_t> bounds);
  UOp(const UOp&) = delete;
  UOp& operator=(const UOp&) = delete;

  // Scratch of one graph walk at a time (the schedule cache's key, runtime/realize.cpp, under its own lock): the
  // number of the last walk that reached this node and its position in that walk. A field read in place, where a
  // map from nodes to positions cost a hash probe per edge (ShuffleNet's step walks some 20k nodes).
  mutable uint64_t walk = 0;
  mutable uint32_t walk_pos = 0;

private:
  // Finds or builds the node: the public makes' lists, read in place (the node copies them only when it is new).
  static UOpPtr intern(Ops op, DType dtype, std::span<const UOpPtr> src, Arg&& arg);
  size_t hash_;
  bool interned_ = false;
  friend struct InternTable;
};

size_t live_uops();
// Nodes built since the process started (found ones not counted): growth of the graphs, which
// live_uops() alone cannot tell from nodes that caches keep.
size_t uops_made();

// Builders. Each checks its inputs and derives dtype and shape.
UOpPtr const_int(DType dt, int64_t v);
UOpPtr const_float(DType dt, double v);
UOpPtr const_like(const UOpPtr& x, double v); // a constant of x's dtype (int or float)
// Runtime scalars: kernels take their values as arguments, so a new value compiles nothing.
UOpPtr var_int(DType dt, int64_t v);
UOpPtr var_float(DType dt, double v);
UOpPtr buffer(const BufferRef& buf);
UOpPtr iota(int64_t n, DType dt);              // shape (n,)
UOpPtr view(const UOpPtr& x, ShapeTracker st); // st is moved into the node
UOpPtr reshape(const UOpPtr& x, const Shape& shape);
// A view that only reshapes its source (row-major, every element once).
bool is_reshape(const UOpPtr& n);
UOpPtr expand(const UOpPtr& x, const Shape& shape);
UOpPtr permute(const UOpPtr& x, const std::vector<int64_t>& order);
UOpPtr pad(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& pads);
UOpPtr shrink(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& ranges);
UOpPtr flip(const UOpPtr& x, const std::vector<bool>& axes);
// Reduces `axes` of x with op (ADD, MUL, MAX, MIN); the result has size 1 on those axes.
UOpPtr reduce(const UOpPtr& x, Ops op, const std::vector<int64_t>& axes);
// Marks x to be computed into a buffer of its own (a realize boundary).
UOpPtr contiguous(const UOpPtr& x);
UOpPtr alu(Ops op, const UOpPtr& a);
UOpPtr alu(Ops op, const UOpPtr& a, const UOpPtr& b);
UOpPtr where(const UOpPtr& c, const UOpPtr& a, const UOpPtr& b);
// Integer a / b (IDIV) or a % b (MOD) of a user's values: a zero divisor is reported to the sync that
// computes it, which raises ZeroDivisionError as torch does at the call (index math divides unchecked).
UOpPtr checked_division(Ops op, const UOpPtr& a, const UOpPtr& b);
bool is_checked_division(const UOpPtr& n);
UOpPtr cast(const UOpPtr& x, DType dt);
UOpPtr bitcast(const UOpPtr& x, DType dt);
UOpPtr assign(const UOpPtr& base, const UOpPtr& value, const View& region);
UOpPtr gather(const UOpPtr& data, const UOpPtr& index);
// The WINOGRAD node of x (N, 2 Ty + 2, 2 Tx + 2, C) and u (16, C, K), both float32, for a result (N, K, height, width).
UOpPtr winograd(const UOpPtr& x, const UOpPtr& u, int64_t height, int64_t width);
// The WINOGRAD_FILTER_GRAD node of x (N, 2 Ty + 2, 2 Tx + 2, C) and g (N, 2 Ty + 2 qy, 2 Tx + 2 qx, K), both float32,
// summed in `chunks` chunks of the images.
UOpPtr winograd_filter_grad(const UOpPtr& x, const UOpPtr& g, int64_t chunks);
// combine: Ops::ADD/MUL/MAX/MIN, or std::nullopt to replace.
UOpPtr scatter(const UOpPtr& base, const UOpPtr& index, const UOpPtr& value, std::optional<Ops> combine);

// Index arithmetic helpers (int64), folding constants as they build.
UOpPtr idx_const(int64_t v);
UOpPtr operator+(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator*(const UOpPtr& a, const UOpPtr& b);

// Nodes of the graph below `root` (inclusive), sources before users.
std::vector<UOpPtr> toposort(const UOpPtr& root);
// The nodes under root not in `seen`, in toposort's order, added to `seen`: the walk of several roots that share
// nodes visits each once (a training step's hundred parameter updates read one backward graph).
std::vector<UOpPtr> toposort(const UOpPtr& root, NodeSet& seen);

} // namespace tiny
