#pragma once
// Lowering: a tensor-level kernel (an output region and the value to store there) becomes a loop
// nest over the output with explicit index math: RANGE loop variables, LOAD/STORE through PARAM
// buffer arguments. The pipeline, in order:
//   1. push_views      views move through elementwise ops onto the buffers they read
//   2. coalesce        output dims that every access walks contiguously merge into one loop
//   3. upcast/lanes    blocks of outputs computed together (register blocking), one dim as vector lanes
//   4. index           each view becomes an index expression over the loop variables
//   5. symbolic        index math folds (constant folding, div/mod of aligned sums, digit merging)
// Steps 1, 2, 4 and 5 are target-neutral. Step 3 is the CPU's strategy; a GPU target replaces it with
// a grid: output loops become work-group and thread ids, reductions per-thread loops or, when long
// and few, a grouped reduce (per-thread partial results combined through local memory).

#include <optional>
#include <string>
#include <vector>

#include "compiler/rewrite.h"
#include "compiler/target.h"
#include "compiler/uop.h"

namespace tiny {

// CPU: the geometry of a WINOGRAD node's kernel (see compiler/winograd.h): x (images, 2 tile_rows + 2, 2 tiles + 2,
// channels) and u (16, channels, outputs) into (images, outputs, height, width); or, chunks > 0, a
// WINOGRAD_FILTER_GRAD's: x and g (images, grad_rows, grad_cols, outputs) into (chunks, 16, outputs, channels).
struct WinogradShape {
  int64_t images, channels, outputs, tile_rows, tiles, height, width;
  int64_t chunks = 0, grad_rows = 0, grad_cols = 0;
  bool operator==(const WinogradShape&) const = default;
};

struct Kernel {
  std::string name;
  UOpPtr ast;                     // SINK(STORE(PARAM, index, value)...)
  std::vector<BufferRef> buffers; // PARAM slot -> buffer; slots [0, launch.outputs) are the ones it writes
  Shape loops;                    // loop extents, outermost first (the outermost is split across threads)
  std::vector<int64_t> ivars;     // ARG values: integer and bool runtime scalars
  std::vector<double> fvars;      // ARG values: float runtime scalars
  std::vector<UOpPtr> var_nodes;  // the DEFINE_VARs behind them, in order (ints and floats interleaved)
  // Tensor-level reductions this kernel would recompute inside another reduction's loop: the
  // scheduler realizes them first and lowers again.
  std::vector<UOpPtr> must_realize;
  // Reduce loops may be reordered and vectorized along the reduced axis (every read is contiguous
  // there); otherwise blocks of accumulators vectorize across outputs.
  bool vectorize_reduce = false;
  // Lanes: a RANGE id (lane_range, not a loop) numbering `lanes` adjacent outputs that the renderer
  // computes as one vector value (-1: none). Every node that depends on it is a vector. (GPU: a value
  // per lane in registers; contiguous reads and the store are vector accesses.)
  int64_t lane_range = -1;
  int64_t lanes = 1;
  Launch launch{}; // CPU: global[0] = loops[0]; GPU: the grid
  // GPU: whether this thread has an output (the grid rounds up to whole work-groups); null: all do.
  UOpPtr thread_valid{};
  // CPU: the reductions are blocks of bfloat16 pair dots computed in AMX tiles (see TileBlock).
  bool tiles = false;
  // CPU: each contiguous vector load also prefetches what it will load in the next iteration of the outermost
  // loop (a layout copy whose reads the hardware prefetchers miss, see lower_transposed_copy).
  bool prefetch_next = false;
  // CPU: some outputs are computed and stored twice (a lane loop that does not divide into vectors ends on one
  // overlapping the vector before, see lower_blocked): the kernel must not write a buffer it reads, even where it
  // reads each element only where it writes it (write_in_place).
  bool stores_twice = false;
  // CPU: a WINOGRAD node's kernel, named W_N_C_K_H_W and rendered by render_winograd (its ast has no stores; buffers:
  // out, x, u).
  std::optional<WinogradShape> winograd{};
};

// GPU kernels: RANGE ids [kGroupRange, +3) are work-group ids and [kLocalRange, +3) thread ids within
// the group (axes x, y, z), not loops; a REDUCE with a thread id among its ranges is a grouped
// reduce. `loops` are sequential loops every thread runs (a scatter's), ids kGpuRanges + position;
// reduce loops follow.
constexpr int64_t kGroupRange = 0, kLocalRange = 3, kGpuRanges = 6;

// The RANGE of a kernel numbered `id` (a loop's, or the lanes'), null where the kernel has none.
const UOp* range_node(const Kernel& k, int64_t id);
// The RANGE of a kernel's vector lanes (its id k.lane_range), null where the kernel has none.
const UOp* lane_node(const Kernel& k);

// idx = base + stride * lane with base free of `lane`: {base, stride}; nullopt when idx is not of that
// form. An idx free of lane is {idx, 0}.
std::optional<std::pair<UOpPtr, int64_t>> lane_split(const UOpPtr& idx, const UOp* lane);

// A step of a float32 sum of products of two bfloat16 loads over pairs of adjacent elements: the
// reduction's innermost loop `pair` (a RANGE of 2) indexes both loads with stride 1, `x` is the same for
// every lane, `y` is a panel interleaved by pairs (lane l's pair at base + 2 l). The C renderer computes
// a step as one pair dot product per lane (AVX512_BF16's vdpbf16ps, or two widened multiply-adds). Or y's
// pairs lie in two rows `y_rows` elements apart, its lanes contiguous in each (y read in place, see
// pairs_in_place in lower.cpp): only AMX tiles read such pairs (see TileBlock), interleaving them as they load.
struct PairDot {
  UOpPtr pair, x, y;  // the loop, the loads
  int64_t y_rows = 0; // the stride of y's pair, where y is read in place (0: a panel)
};
std::optional<PairDot> pair_dot(const UOpPtr& reduce, const UOp* lane);

// A block of bfloat16 pair dots (see pair_dot) computed as AMX tiles: the reductions of one register
// block (rows of x times 16-lane vectors of y, each a PairDot over the same loops) step along their
// innermost loop 16 pairs at a time. Each row's x is 32 contiguous bfloat16 values per step (an A tile
// row), each vector's y 16 pairs of a panel `y_step` elements apart (a B tile in AMX's pair layout), or,
// y read in place, 16 pairs of rows whose lanes the tiles' loop interleaves into a B tile each step: then
// the loop has no rest and the vectors are one, or two adjacent (interleaved together, see render_c).
struct TileBlock {
  UOpPtr loop;                               // the reduce loop stepped by 16
  UOpPtr x, y;                               // a load of each operand (their PARAMs are src[0])
  std::vector<UOpPtr> rows;                  // x's word index for each row at pair 0, rows in order
  int64_t row_stride = 0;                    // elements between rows of x
  std::vector<UOpPtr> cols;                  // y's lane-0 word index for each vector at pair 0
  int64_t y_step = 0;                        // elements between y's pairs along `loop`
  int64_t y_rows = 0;                        // y read in place: elements between a pair's two rows (see PairDot)
  std::vector<std::pair<size_t, size_t>> at; // each reduction's (row, vector)
  int64_t groups() const { return (static_cast<int64_t>(rows.size()) + 15) / 16; } // A tiles of 16 rows
};
std::optional<TileBlock> tile_block(const std::vector<UOpPtr>& reduces, const UOp* lane);

// The step of a read's flat index along its dim d, where it moves by a fixed step there and its validity does not
// move (-1 otherwise): the view's stride for one view (masked or not); for a stack of views that did not merge into one
// (a per-channel bias broadcast over (N, C, H, W), then viewed as batch norm's split sum (C, parts, N / parts, H * W)),
// what the index walks, found by evaluating it symbolically.
int64_t step_along(const ShapeTracker& st, size_t d);

// Whether the CPU the C kernels are compiled for has AVX-512 (vectors of 16 floats in one register).
bool wide_vectors();

// The largest power of two (up to 2^30) that divides every value the index expression idx takes, as
// its form shows (a sum of multiples of constants): whether a vector access at idx is aligned.
int64_t index_alignment(const UOpPtr& idx);

// The kernel that writes `value` (a tensor-level graph over BUFFER and CONST leaves, shape
// out_region.shape) into the elements `out_region` names of the flat buffer `out`.
// On a GPU target, the grid strategy replaces the CPU's loops and lanes.
Kernel lower_kernel(const BufferRef& out, const View& out_region, const UOpPtr& value, const Target& target = {});

// Layout copies for reductions, when the reduction reuses each element enough to pay for the copy
// (the CONTIGUOUS nodes it inserts are realized before the kernel is lowered):
// - an output dim that every read walks contiguously or not at all becomes vector lanes; small reads
//   that stride along it (a convolution's filters along the output channels) read a copy laid out
//   with that dim innermost;
// - else a read that walks the reduced axis with a stride (and no output dim contiguously) reads a
//   copy laid out with the reduced axes innermost.
// The lanes' copies are laid out in panels as wide as the target's kernels block their lanes.
UOpPtr contiguous_reduce_layout(const UOpPtr& value, const Target& target);

// A window read m (a view of a padded or computed value) that strides along its dim d, read instead from a copy in
// which d is contiguous: the window's dims that walk the same source dim as d unfolded, d innermost
// (U[.., kernel column, output column] = P[.., s column + kernel column], the source's other dims whole). A stride-2
// convolution's lanes along its output columns, and a strided max pool's taps, read adjacent elements from it. Null
// where a dim of the window does not walk one source dim alone, where d does not stride its source dim, where m
// is one view of a buffer (its source dims unknown), or where `work` is below `reuse` times U's size.
UOpPtr unfolded_window(const UOpPtr& m, size_t d, int64_t work, int64_t reuse);

// A computed value (two or more elementwise ops) that a reduction reads through a broadcasting or
// windowed view would be recomputed for every reuse (a gradient read by a convolution's weight
// gradient, once per filter tap and channel): it is wrapped in CONTIGUOUS, realized first, laid out in
// the order its reads walk their buffers where they all agree (a value of a transposed read is written
// as it is read, not transposed: sdpa's keys in bfloat16). Runs on the graph before views are pushed to
// the leaves.
UOpPtr realize_reused_values(const UOpPtr& value);

// An elementwise value's costly factors (a division, a square root, an exponential...) that hold one value along most
// of the kernel's elements, computed from plain reads of small buffers (batch norm's per-channel gamma / sqrt(var +
// eps) in its (N, C, H, W) gradient kernel), are wrapped in CONTIGUOUS over their distinct elements: computed once
// each (the scheduler realizes them first) instead of at every element. CPU targets. Runs on the graph after views
// are pushed to the leaves.
UOpPtr realize_broadcast_factors(const UOpPtr& value, const Target& target);

// A reduction of many elements into few outputs would run on few threads (one thread, or one
// work-group on a GPU, for a full reduction): it is split in two. Each output's elements, in `parts`
// equal runs, are reduced in parallel into a buffer of partial results (a CONTIGUOUS node the scheduler
// realizes first), and the partial results are reduced in the kernel. It applies to reductions of
// fewer than kSplitOutputs outputs over kSplitMinElements or more elements each, with parts of
// kSplitMinPart elements or more (so that a part's loop is long enough to pay for its launch share). On a CPU
// target a sum that re-reads a large strided operand from L3 once per block of rows (x @ w of 9-63 rows with w
// row-major) is split too, into runs of 256 of its reduced axis, so that each run stays in L2 (see
// rereads_strided_panel in lower.cpp); so are, into runs of about 256 rows, a reduction over 3072 or more rows 1 KiB
// or more apart that outputs' lanes read contiguously (a column sum: walks_far_rows) and a product whose operand
// broadcast along the lanes would be copied with its reduced axis innermost but is reused fewer than 512 times (a.t()
// @ b with b of 128 columns: copies_little_reused_operand).
constexpr int64_t kSplitOutputs = 256, kSplitMinElements = 16384, kSplitMinPart = 1024;
UOpPtr split_long_reductions(const UOpPtr& value, const Target& target);

// The kernel that scatters `value` into `out` at the flat positions `index` (same shape as value),
// combining with the old value by `combine` (an Ops value as int64; -1 replaces), in element order.
Kernel lower_scatter(const BufferRef& out, const UOpPtr& index, const UOpPtr& value, int64_t combine,
                     const Target& target = {});

// The flat index and validity of reading `st` at `idx` (one index per dim of st.shape()).
std::pair<UOpPtr, UOpPtr> view_index(const ShapeTracker& st, const std::vector<UOpPtr>& idx);

extern const PatternMatcher push_views;
// Uniform factors (constants, runtime scalars) of float sums of products, applied to the sum instead.
extern const PatternMatcher hoist_factors;

} // namespace tiny
