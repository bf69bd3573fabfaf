#include "compiler/winograd.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace tiny {

namespace {

// The registers of a block: up to 28 accumulators of 16 lanes (tiles x vectors of output channels), beside them the
// vectors of u that a channel's step loads and a tile's value broadcast. A block of 14 tiles by 32 outputs is
// docs/studies/winograd_f23.c's; with every loop over the block unrolled, rolled its accumulators spilled (8.4-8.9 ms
// against 3.2-3.5). Blocks of 7 tiles by 64 outputs spilled too: the (128, 64, 14, 14) by (64, 64, 3, 3) layer, two
// threads, 3.8 ms against 3.1-3.2 in blocks of 7 by 32.
constexpr int64_t kAccumulators = 28;
// The bytes of transformed input a block of tiles holds at most (16 products x tiles x channels floats): within one
// core's L2, on the stack of the thread that runs it.
constexpr int64_t kScratchBytes = 256 * 1024;

struct Blocks {
  int64_t vecs;  // vectors of 16 output channels a block computes
  int64_t tiles; // tiles a block computes, an image's tile rows row-major (its last block may have fewer, the others 0)
  int64_t count; // blocks an image
};

// Blocks of consecutive tiles (an image's tile rows row-major), as many as the registers hold, equal in size: a block
// may span rows, so that images of few tiles a row fill the registers too (the demo's 14 x 14 layers, 7 tiles a row, in
// blocks of 13 by 32 outputs: 3.7-3.9 ms against 3.6-3.8 a row at a time, alike; a 7 x 7 image, 4 tiles a row, had
// blocks of 4).
Blocks blocks_of(const WinogradShape& w) {
  const int64_t vecs = w.outputs % 32 == 0 ? 2 : 1, tiles = w.tile_rows * w.tiles;
  const int64_t most = std::max<int64_t>(1, std::min(kAccumulators / vecs, kScratchBytes / (64 * w.channels)));
  const int64_t count = (tiles + most - 1) / most, size = (tiles + count - 1) / count;
  return {vecs, size, (tiles + size - 1) / size};
}

// The statements that transpose r[0..16), 16 vectors of 16 floats, in place: four stages, each exchanging the
// off-diagonal blocks of b x b elements between rows i and i + b (a two-source permute per row).
void emit_transpose(std::ostringstream& os, const std::string& ind) {
  for (int b = 8; b >= 1; b /= 2) {
    std::ostringstream lo, hi;
    for (int l = 0; l < 16; l++) {
      lo << (l ? ", " : "") << ((l & b) == 0 ? l : 16 + (l ^ b));
      hi << (l ? ", " : "") << ((l & b) != 0 ? 16 + l : (l ^ b));
    }
    os << ind << "{\n"
       << ind << "  const __m512i lo = _mm512_setr_epi32(" << lo.str() << ");\n"
       << ind << "  const __m512i hi = _mm512_setr_epi32(" << hi.str() << ");\n";
    for (int i = 0; i < 16; i++)
      if ((i & b) == 0)
        os << ind << "  { const __m512 a = r[" << i << "], c = r[" << (i | b) << "]; r[" << i
           << "] = _mm512_permutex2var_ps(a, lo, c); r[" << (i | b) << "] = _mm512_permutex2var_ps(a, hi, c); }\n";
    os << ind << "}\n";
  }
}

using Matrix = std::vector<std::vector<double>>;

// F(2 x 2, 3 x 3)'s filter transform G (g G^T) and F(3 x 3, 2 x 2)'s output transform, G^T.
const Matrix kG{{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
const Matrix kGt{{1, 0.5, 0.5, 0}, {0, 0.5, -0.5, 0}, {0, 0.5, 0.5, 1}};

// The two-dimensional transform of m: (m x m)[(r, s), (i, j)] = m[r][i] m[s][j].
Matrix kron(const Matrix& m) {
  Matrix out;
  for (const auto& a : m)
    for (const auto& b : m) {
      out.emplace_back();
      for (double x : a)
        for (double y : b)
          out.back().push_back(x * y);
    }
  return out;
}

// m as a float32 tensor realized by a kernel of its own (its nonzero entries placed and added): read as a buffer by
// the transforms' sums, where each element of a sum of placed constants tested every entry's place (the (16, 64, 64)
// filter transform of the demo's layer, two nested such sums, 1.8-2.0 ms a step against a sum of 9 products).
UOpPtr constant_matrix(const Matrix& m) {
  const int64_t rows = static_cast<int64_t>(m.size()), cols = static_cast<int64_t>(m[0].size());
  UOpPtr out;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < cols; i++)
      if (m[r][i] != 0) {
        const UOpPtr placed =
            pad(reshape(const_float(DType::Float32, m[r][i]), {1, 1}), {{r, rows - 1 - r}, {i, cols - 1 - i}});
        out = out ? alu(Ops::ADD, out, placed) : placed;
      }
  return contiguous(out);
}

// Winograd's transformed filters (16, C, K) of w (K, C, 3, 3): G g G^T of each filter g, as 16 sums of its 9 taps.
UOpPtr winograd_filters(const UOpPtr& w) {
  const int64_t K = w->shape[0], C = w->shape[1];
  const UOpPtr taps =
      expand(reshape(permute(reshape(cast(w, DType::Float32), {K, C, 9}), {1, 0, 2}), {1, C, K, 9}), {16, C, K, 9});
  const UOpPtr g = expand(reshape(constant_matrix(kron(kG)), {16, 1, 1, 9}), {16, C, K, 9});
  return reshape(reduce(alu(Ops::MUL, g, taps), Ops::ADD, {3}), {16, C, K});
}

// x (N, C, H, W) padded by `padding` and to whole 2 x 2 tiles of the output, channels-last: (N, 2 Ty + 2, 2 Tx + 2, C)
// float32, and the output's size.
std::pair<UOpPtr, Shape> padded_tiles(const UOpPtr& x, const Shape& padding) {
  Shape out;
  std::vector<std::pair<int64_t, int64_t>> pads{{0, 0}, {0, 0}};
  for (size_t i = 0; i < 2; i++) {
    const int64_t in = x->shape[2 + i], o = in + 2 * padding[i] - 2, tiles = (o + 1) / 2;
    out.push_back(o);
    pads.emplace_back(padding[i], 2 * tiles + 2 - in - padding[i]);
  }
  return {permute(pad(cast(x, DType::Float32), pads), {0, 2, 3, 1}), out};
}

} // namespace

UOpPtr winograd_correlation(const UOpPtr& x, const UOpPtr& w, const Shape& padding) {
  const auto [xp, out] = padded_tiles(x, padding);
  return winograd(xp, winograd_filters(w), out[0], out[1]);
}

UOpPtr winograd_filter_gradient(const UOpPtr& x, const UOpPtr& go, const Shape& padding, int64_t chunks) {
  const auto [xp, out] = padded_tiles(x, padding);
  if (go->shape.size() != 4 || go->shape[2] != out[0] || go->shape[3] != out[1] || padding[0] > 2 || padding[1] > 2)
    throw std::invalid_argument("winograd_filter_gradient: grad_output does not match the correlation's output");
  // go as the input gradient's correlation pads it (2 - padding a side, to whole tiles of the input): one copy for both
  const UOpPtr g = padded_tiles(go, {2 - padding[0], 2 - padding[1]}).first;
  // G^T m G of the chunks' sum m, as 9 sums of the chunks' 16 transformed sums each
  const int64_t K = go->shape[1], C = x->shape[1];
  const UOpPtr sums = expand(reshape(permute(winograd_filter_grad(xp, g, chunks), {2, 3, 0, 1}), {K, C, 1, chunks, 16}),
                             {K, C, 9, chunks, 16});
  const UOpPtr gt = expand(reshape(constant_matrix(kron(kGt)), {1, 1, 9, 1, 16}), {K, C, 9, chunks, 16});
  return reshape(reduce(alu(Ops::MUL, gt, sums), Ops::ADD, {3, 4}), {K, C, 3, 3});
}

Kernel lower_winograd(const BufferRef& out, const UOpPtr& node, const BufferRef& x, const BufferRef& u) {
  const Shape &xs = node->src[0]->shape, &ys = node->shape;
  const int64_t tile_rows = (xs[1] - 2) / 2, tiles = (xs[2] - 2) / 2;
  std::ostringstream name;
  WinogradShape w{};
  if (node->op == Ops::WINOGRAD) {
    w = {xs[0], xs[3], ys[1], tile_rows, tiles, ys[2], ys[3]};
    name << "W_" << w.images << "_" << w.channels << "_" << w.outputs << "_" << w.height << "_" << w.width;
  } else if (node->op == Ops::WINOGRAD_FILTER_GRAD) {
    const Shape& gs = node->src[1]->shape;
    w = {xs[0], xs[3], ys[2], tile_rows, tiles, 2 * tile_rows, 2 * tiles, ys[0], gs[1], gs[2]};
    name << "W_" << w.chunks << "_16_" << w.outputs << "_" << w.channels << "_" << w.images;
  } else
    throw std::logic_error("lower_winograd: not a WINOGRAD node");
  const Shape loops{w.chunks ? w.chunks : w.images * blocks_of(w).count};
  Kernel k{name.str(), UOp::make(Ops::SINK, DType::Void, {}), {out, x, u}, loops, {}, {}, {}, {}};
  k.launch.global[0] = k.loops[0];
  k.launch.work = w.images * w.tile_rows * w.tiles * 36 * w.channels * w.outputs;
  k.winograd = w;
  return k;
}

namespace {

std::string unroll(const std::string& ind) { return ind + "#pragma clang loop unroll(full)\n"; }

// The floats (a cache line) between the 16 planes of a kernel's transformed tiles beyond the planes' own size: planes a
// multiple of 4 KiB apart (a filter gradient's blocks of C = K hold TB C = 1024 floats a plane) fall in the same L1
// sets, and a tile's 16 stores, one a plane, evicted each other. The demo's 32-channel filter gradient, 64 images on
// one Sapphire Rapids thread in a C harness: 5.3 -> 4.4 ms.
constexpr int64_t kPlanePad = 16;

// The transforms' matrices (entries 0, 1, -1), as the kernels apply them to a tile: M w M^T of its window w.
using Transform = std::vector<std::vector<int>>;
const Transform kInputTransform = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}}; // B^T, F(2 x 2, 3 x 3)
const Transform kOutputTransform = {{1, 1, 1, 0}, {0, 1, -1, -1}};                             // A^T
const Transform kGradientTransform = {{1, 0}, {1, 1}, {1, -1}, {0, -1}}; // A: F(3 x 3, 2 x 2)'s input transform

// The vector sum of term(k) weighted by row[k]: its positive terms added in order, then its negative ones subtracted
// (from zero where none is positive).
std::string combination(const std::vector<int>& row, const std::function<std::string(size_t)>& term) {
  std::string sum;
  for (int sign : {1, -1})
    for (size_t k = 0; k < row.size(); k++)
      if (row[k] == sign)
        sum = sum.empty() ? (sign > 0 ? term(k) : "_mm512_sub_ps(_mm512_setzero_ps(), " + term(k) + ")")
                          : std::string(sign > 0 ? "_mm512_add_ps(" : "_mm512_sub_ps(") + sum + ", " + term(k) + ")";
  return sum;
}

// The statements computing m w m^T of the window in[n][n] (declared and loaded before them, at indent ind): the
// columns' sums e[i][j] first, then each row i's outputs (i, l), stored by the statement store(l, value) (in terms of
// the row's loop variable i).
void emit_tile_transform(std::ostringstream& os, const std::string& ind, const Transform& m, const std::string& in,
                         const std::function<std::string(size_t, const std::string&)>& store) {
  const size_t rows = m.size(), n = m[0].size();
  os << ind << "__m512 e[" << rows << "][" << n << "];\n"
     << unroll(ind) << ind << "for (int j = 0; j < " << n << "; j++) {\n";
  for (size_t i = 0; i < rows; i++)
    os << ind << "  e[" << i
       << "][j] = " << combination(m[i], [&](size_t k) { return in + "[" + std::to_string(k) + "][j]"; }) << ";\n";
  os << ind << "}\n" << unroll(ind) << ind << "for (int i = 0; i < " << rows << "; i++) {\n";
  for (size_t l = 0; l < rows; l++)
    os << ind << "  " << store(l, combination(m[l], [](size_t k) { return "e[i][" + std::to_string(k) + "]"; }))
       << ";\n";
  os << ind << "}\n";
}

// The store of a tile's output (i, l) into plane 4 i + l of a block's scratch, its planes `stride` floats apart.
std::function<std::string(size_t, const std::string&)> plane_store(const std::string& stride) {
  return [stride](size_t l, const std::string& value) {
    return "_mm512_store_ps(o + (4 * i" + std::string(l ? " + " + std::to_string(l) : "") + ") * " + stride + ", " +
           value + ")";
  };
}

// fn_input(x, v, n, q0, nt): v[16][TB][C] = B^T d B of tiles [q0, q0 + nt) of image n (row-major over its tile rows),
// the block's other tiles 0; v's 16 planes VS = TB C + 16 floats apart (see kPlanePad).
void emit_input(std::ostringstream& os, const std::string& fn, const std::string& sizes) {
  os << "__attribute__((noinline)) static void " << fn
     << "_input(const float* restrict x, float* restrict v, int64_t n, int64_t q0, int64_t nt) {\n"
     << sizes << "  for (int64_t t = 0; t < TB; t++)\n"
     << "    for (int64_t c = 0; c < C; c += 16) {\n"
     << "      float* o = v + t * C + c;\n"
     << "      if (t >= nt) {\n"
     << "        for (int xi = 0; xi < 16; xi++)\n"
     << "          _mm512_store_ps(o + xi * VS, _mm512_setzero_ps());\n"
     << "        continue;\n"
     << "      }\n"
     << "      const int64_t ty = (q0 + t) / TX, tx = (q0 + t) % TX;\n"
     << "      const float* p = x + ((n * PH + 2 * ty) * PW + 2 * tx) * C + c;\n"
     << "      __m512 d[4][4];\n"
     << unroll("      ") << "      for (int i = 0; i < 4; i++)\n"
     << unroll("        ") << "        for (int j = 0; j < 4; j++)\n"
     << "          d[i][j] = _mm512_loadu_ps(p + (i * PW + j) * C);\n";
  emit_tile_transform(os, "      ", kInputTransform, "d", plane_store("VS"));
  os << "    }\n"
     << "}\n\n";
}

// A block of products in registers: acc[rows][vecs], vectors of 16 floats, zero or (accumulate) loaded from `out`;
// for each of `steps` steps the vectors b + step * b_step + 16 q are loaded and a[r * a_row + step * a_step] broadcast
// to multiply them; then acc stored to `out` (row r at out + r * out_row + 16 q). The correlation's products (tiles by
// outputs, over the channels) and the filter gradient's (outputs by channels, over the tiles) are both such blocks.
struct RegisterBlock {
  std::string rows, vecs, steps, a, a_row, a_step, b, b_step, out, out_row;
  bool accumulate;
};

void emit_register_block(std::ostringstream& os, const std::string& ind, const RegisterBlock& k) {
  os << ind << "{\n"
     << ind << "  float* o = " << k.out << ";\n"
     << ind << "  const float* a = " << k.a << ";\n"
     << ind << "  const float* b = " << k.b << ";\n"
     << ind << "  __m512 acc[" << k.rows << "][" << k.vecs << "];\n"
     << unroll(ind + "  ") << ind << "  for (int r = 0; r < " << k.rows << "; r++)\n"
     << unroll(ind + "    ") << ind << "    for (int q = 0; q < " << k.vecs << "; q++)\n"
     << ind << "      acc[r][q] = "
     << (k.accumulate ? "_mm512_loadu_ps(o + r * (" + k.out_row + ") + 16 * q)" : std::string("_mm512_setzero_ps()"))
     << ";\n"
     << ind << "  for (int s = 0; s < " << k.steps << "; s++) {\n"
     << ind << "    __m512 g[" << k.vecs << "];\n"
     << unroll(ind + "    ") << ind << "    for (int q = 0; q < " << k.vecs << "; q++)\n"
     << ind << "      g[q] = _mm512_loadu_ps(b + s * (" << k.b_step << ") + 16 * q);\n"
     << unroll(ind + "    ") << ind << "    for (int r = 0; r < " << k.rows << "; r++) {\n"
     << ind << "      const __m512 x = _mm512_set1_ps(a[r * (" << k.a_row << ") + s * (" << k.a_step << ")]);\n"
     << unroll(ind + "      ") << ind << "      for (int q = 0; q < " << k.vecs << "; q++)\n"
     << ind << "        acc[r][q] = _mm512_fmadd_ps(x, g[q], acc[r][q]);\n"
     << ind << "    }\n"
     << ind << "  }\n"
     << unroll(ind + "  ") << ind << "  for (int r = 0; r < " << k.rows << "; r++)\n"
     << unroll(ind + "    ") << ind << "    for (int q = 0; q < " << k.vecs << "; q++)\n"
     << ind << "      _mm512_storeu_ps(o + r * (" << k.out_row << ") + 16 * q, acc[r][q]);\n"
     << ind << "}\n";
}

constexpr const char* kHeader = "#if !defined(__AVX512F__)\n#error \"tiny: a Winograd convolution kernel needs "
                                "AVX-512F\"\n#endif\n#include <immintrin.h>\n\n";
constexpr const char* kSignature =
    "(void* const* bufs, const int64_t* ivars, const double* fvars, int64_t begin, int64_t end) {\n"
    "  (void)ivars; (void)fvars;\n";

// A correlation's kernel (see Blocks): per image and block of tiles, the input transform, then per block of outputs the
// products and the output transform into y's rows.
std::string render_correlation(const WinogradShape& w, const std::string& fn) {
  const Blocks b = blocks_of(w);
  std::ostringstream sizes_os;
  sizes_os << "  enum { C = " << w.channels << ", K = " << w.outputs << ", TY = " << w.tile_rows << ", TX = " << w.tiles
           << ", H = " << w.height << ", W = " << w.width << ", PH = 2 * TY + 2, PW = 2 * TX + 2, TB = " << b.tiles
           << ", KV = " << b.vecs << ", NB = " << b.count << ", VS = TB * C + " << kPlanePad << ", MS = TB * 16 * KV + "
           << kPlanePad << " };\n";
  const std::string sizes = sizes_os.str();
  // Functions of their own, not inlined: in one, the transposes' index vectors, hoisted out of the loops, held
  // registers that the products' 28 accumulators then spilled for (5.0 ms against 3.8).
  std::ostringstream os;
  os << kHeader;
  emit_input(os, fn, sizes);
  os << "// m[16][TB][16 KV]: the products of v's tiles and u's outputs [k0, k0 + 16 KV), summed over the channels\n"
     << "__attribute__((noinline)) static void " << fn
     << "_products(const float* restrict u, const float* restrict v, float* restrict m, int64_t k0) {\n"
     << sizes << "  for (int xi = 0; xi < 16; xi++) {\n";
  emit_register_block(
      os, "    ",
      {"TB", "KV", "C", "v + xi * VS", "C", "1", "u + xi * C * K + k0", "K", "m + xi * MS", "16 * KV", false});
  os << "  }\n"
     << "}\n\n"
     << "// A^T m A of tiles [q0, q0 + nt) of image n, outputs [k0, k0 + 16 KV), into y's rows, a row of tiles at a "
        "time:\n"
     << "// in registers from channels-innermost to positions-innermost, 16 x 16 at a time\n"
     << "__attribute__((noinline)) static void " << fn
     << "_output(const float* restrict m, float* restrict y, int64_t n, int64_t q0, int64_t nt, int64_t k0) {\n"
     << sizes << "  float s[2][2 * TB + 16][16] __attribute__((aligned(64)));\n"
     << "  for (int64_t q = 0; q < KV; q++) {\n"
     << "    for (int64_t t = 0; t < nt; t++) {\n"
     << "      __m512 a[4][4];\n"
     << unroll("      ") << "      for (int i = 0; i < 4; i++)\n"
     << unroll("        ") << "        for (int j = 0; j < 4; j++)\n"
     << "          a[i][j] = _mm512_load_ps(m + (4 * i + j) * MS + t * 16 * KV + 16 * q);\n";
  emit_tile_transform(os, "      ", kOutputTransform, "a", [](size_t l, const std::string& value) {
    return "_mm512_store_ps(s[i][2 * t" + std::string(l ? " + " + std::to_string(l) : "") + "], " + value + ")";
  });
  os << "    }\n"
     << "    for (int64_t t = 0, tiles; t < nt; t += tiles) {\n"
     << "      const int64_t ty = (q0 + t) / TX, tx = (q0 + t) % TX;\n"
     << "      tiles = nt - t < TX - tx ? nt - t : TX - tx;\n"
     << "      const int64_t count = W - 2 * tx < 2 * tiles ? W - 2 * tx : 2 * tiles;\n"
     << "      for (int64_t i = 0; i < 2 && 2 * ty + i < H; i++)\n"
     << "        for (int64_t p0 = 0; p0 < count; p0 += 16) {\n"
     << "          __m512 r[16];\n"
     << unroll("          ") << "          for (int l = 0; l < 16; l++)\n"
     << "            r[l] = _mm512_load_ps(s[i][2 * t + p0 + l]);\n";
  emit_transpose(os, "          ");
  os << "          const __mmask16 keep = count - p0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (count - p0)) - "
        "1);\n"
     << "          float* o = y + ((n * K + k0 + 16 * q) * H + 2 * ty + i) * W + 2 * tx + p0;\n"
     << unroll("          ") << "          for (int l = 0; l < 16; l++)\n"
     << "            _mm512_mask_storeu_ps(o + (int64_t)l * H * W, keep, r[l]);\n"
     << "        }\n"
     << "    }\n"
     << "  }\n"
     << "}\n\n"
     << "void " << fn << kSignature << sizes << "  float* restrict y = (float*)bufs[0];\n"
     << "  const float* restrict x = (const float*)bufs[1];\n"
     << "  const float* restrict u = (const float*)bufs[2];\n"
     << "  float v[16 * VS] __attribute__((aligned(64)));\n"
     << "  float m[16 * MS] __attribute__((aligned(64)));\n"
     << "  for (int64_t r0 = begin; r0 < end; r0++) {\n"
     << "    const int64_t n = r0 / NB, q0 = r0 % NB * TB, nt = TY * TX - q0 < TB ? TY * TX - q0 : TB;\n"
     << "    " << fn << "_input(x, v, n, q0, nt);\n"
     << "    for (int64_t k0 = 0; k0 < K; k0 += 16 * KV) {\n"
     << "      " << fn << "_products(u, v, m, k0);\n"
     << "      " << fn << "_output(m, y, n, q0, nt, k0);\n"
     << "    }\n"
     << "  }\n"
     << "}\n";
  return os.str();
}

// A filter gradient's blocks: `tiles` tiles of an image (its tile rows row-major) transformed together, their products
// summed in blocks of `rows` outputs by `vecs` vectors of 16 channels (accumulators held in registers across the
// tiles, read from and written back to the chunk's sums), the outputs' last block `rows_tail` rows (0: none). The
// blocks of an image are equal in size, as the correlation's: a last block of few tiles computes the zeros of the
// rest (the demo's 28 x 28 layer's 196 tiles in 7 blocks of 32 computed 224, of 28 196; its 14 x 14 ones' 49 in 4
// of 16 64, of 13 52). With kPlanePad, its 32-channel filter gradient, 64 images on one Sapphire Rapids thread in a
// C harness: 4.4 -> 3.8 ms.
struct FilterGradBlocks {
  int64_t tiles, rows, vecs, rows_tail;
};

// The bytes a filter gradient's block of transformed input and gradient holds (16 x tiles x (C + K) floats): in L2.
constexpr int64_t kFilterGradScratchBytes = 128 * 1024;

FilterGradBlocks filter_grad_blocks(const WinogradShape& w) {
  const int64_t vecs = w.channels % 32 == 0 ? 2 : 1, rows = std::min(w.outputs, kAccumulators / vecs);
  const int64_t tiles = w.tile_rows * w.tiles;
  const int64_t most = std::clamp<int64_t>(kFilterGradScratchBytes / (64 * (w.channels + w.outputs)), 1, tiles);
  const int64_t count = (tiles + most - 1) / most;
  return {(tiles + count - 1) / count, rows, vecs, w.outputs % rows};
}

// A filter gradient's kernel: chunk r0 of the images sums into y[r0][16][K][C] the products of the transformed
// gradient A^T g A (A = F(2 x 2, 3 x 3)'s, g a 2 x 2 tile of the output's gradient) and the transformed input B^T d B
// of every tile (its 4 x 4 window), block by block of tiles.
std::string render_filter_grad(const WinogradShape& w, const std::string& fn) {
  const FilterGradBlocks b = filter_grad_blocks(w);
  std::ostringstream sizes_os;
  sizes_os << "  enum { N = " << w.images << ", P = " << w.chunks << ", C = " << w.channels << ", K = " << w.outputs
           << ", TY = " << w.tile_rows << ", TX = " << w.tiles
           << ", PH = 2 * TY + 2, PW = 2 * TX + 2, GH = " << w.grad_rows << ", GW = " << w.grad_cols
           << ", TB = " << b.tiles << ", CV = " << b.vecs << ", VS = TB * C + " << kPlanePad << ", GS = TB * K + "
           << kPlanePad << " };\n";
  const std::string sizes = sizes_os.str();
  std::ostringstream os;
  os << kHeader;
  emit_input(os, fn, sizes);
  os << "// gt[16][TB][K]: A g A^T of the gradient's tiles [q0, q0 + nt) of image n, the block's other tiles 0; its "
        "planes\n"
     << "// GS floats apart\n"
     << "__attribute__((noinline)) static void " << fn
     << "_gradients(const float* restrict g, float* restrict gt, int64_t n, int64_t q0, int64_t nt) {\n"
     << sizes << "  for (int64_t t = 0; t < TB; t++)\n"
     << "    for (int64_t k = 0; k < K; k += 16) {\n"
     << "      float* o = gt + t * K + k;\n"
     << "      if (t >= nt) {\n"
     << "        for (int xi = 0; xi < 16; xi++)\n"
     << "          _mm512_store_ps(o + xi * GS, _mm512_setzero_ps());\n"
     << "        continue;\n"
     << "      }\n"
     << "      const int64_t ty = (q0 + t) / TX, tx = (q0 + t) % TX;\n"
     << "      const float* p = g + ((n * GH + (GH - 2 * TY) / 2 + 2 * ty) * GW + (GW - 2 * TX) / 2 + 2 * tx) * K + "
        "k;\n"
     << "      __m512 h[2][2];\n"
     << unroll("      ") << "      for (int i = 0; i < 2; i++)\n"
     << unroll("        ") << "        for (int j = 0; j < 2; j++)\n"
     << "          h[i][j] = _mm512_loadu_ps(p + (i * GW + j) * K);\n";
  emit_tile_transform(os, "      ", kGradientTransform, "h", plane_store("GS"));
  os << "    }\n"
     << "}\n\n";
  auto products = [&](const std::string& name, int64_t rows) {
    os << "// m[16][K][C] += the products of gt's outputs [k0, k0 + " << rows
       << ") and v's channels, summed over the block's tiles\n"
       << "__attribute__((noinline)) static void " << fn << name
       << "(const float* restrict gt, const float* restrict v, float* restrict m, int64_t k0) {\n"
       << sizes << "  enum { KB = " << rows << " };\n"
       << "  for (int xi = 0; xi < 16; xi++)\n"
       << "    for (int c0 = 0; c0 < C; c0 += 16 * CV) {\n";
    emit_register_block(os, "      ",
                        {"KB", "CV", "TB", "gt + xi * GS + k0", "1", "K", "v + xi * VS + c0", "C",
                         "m + (xi * K + k0) * C + c0", "C", true});
    os << "    }\n"
       << "}\n\n";
  };
  products("_products", b.rows);
  if (b.rows_tail) products("_products_tail", b.rows_tail);
  os << "void " << fn << kSignature << sizes << "  float* restrict y = (float*)bufs[0];\n"
     << "  const float* restrict x = (const float*)bufs[1];\n"
     << "  const float* restrict g = (const float*)bufs[2];\n"
     << "  float v[16 * VS] __attribute__((aligned(64)));\n"
     << "  float gt[16 * GS] __attribute__((aligned(64)));\n"
     << "  for (int64_t r0 = begin; r0 < end; r0++) {\n"
     << "    float* m = y + r0 * 16 * K * C;\n"
     << "    for (int64_t i = 0; i < 16 * K * C; i += 16)\n"
     << "      _mm512_storeu_ps(m + i, _mm512_setzero_ps());\n"
     << "    for (int64_t n = r0 * N / P; n < (r0 + 1) * N / P; n++)\n"
     << "      for (int64_t q0 = 0; q0 < TY * TX; q0 += TB) {\n"
     << "        const int64_t nt = TY * TX - q0 < TB ? TY * TX - q0 : TB;\n"
     << "        " << fn << "_input(x, v, n, q0, nt);\n"
     << "        " << fn << "_gradients(g, gt, n, q0, nt);\n"
     << "        for (int64_t k0 = 0; k0 + " << b.rows << " <= K; k0 += " << b.rows << ")\n"
     << "          " << fn << "_products(gt, v, m, k0);\n";
  if (b.rows_tail) os << "        " << fn << "_products_tail(gt, v, m, K - " << b.rows_tail << ");\n";
  os << "      }\n"
     << "  }\n"
     << "}\n";
  return os.str();
}

} // namespace

std::string render_winograd(const Kernel& k, const std::string& fn) {
  if (!k.winograd) throw std::logic_error("render_winograd: not a WINOGRAD kernel");
  return k.winograd->chunks ? render_filter_grad(*k.winograd, fn) : render_correlation(*k.winograd, fn);
}

} // namespace tiny
