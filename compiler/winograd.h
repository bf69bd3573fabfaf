#pragma once
// A 3 x 3 convolution by Winograd's F(2 x 2, 3 x 3) (Lavin and Gray, 2015), as one CPU kernel of its own: each 2 x 2
// block of outputs (a tile) takes 16 products per channel where the direct convolution takes 36. A WINOGRAD node
// (compiler/uop.h) reads x, the input padded and channels-last (N, 2 Ty + 2, 2 Tx + 2, C), and u, the filters
// transformed (G g G^T of each 3 x 3 filter g, (16, C, K)), and writes (N, K, H, W). Per image and row of tiles the
// kernel transforms each tile's 4 x 4 window of every channel (B^T d B) into a scratch block held in L1 and L2, sums
// the 16 products over the channels for a block of tiles by a block of output channels in vector registers (16 small
// matrix products), transforms those back (A^T m A) and writes the output rows, transposed from channels-innermost in
// registers. The demo's (128, 32, 28, 28) by (32, 32, 3, 3) layer, two threads of a Sapphire Rapids: 3.2-3.6 ms
// against the direct kernel's 5.3 (docs/studies/winograd_f23.c). The transforms round: values differ from the direct
// sum's by a few ulp of the sum's magnitude. Rendered with AVX-512 intrinsics: only a host with AVX-512F gets one
// (see aten_ops/conv.cpp).

#include <string>

#include "compiler/lower.h"

namespace tiny {

// The correlation of x (N, C, H, W) with filters w (K, C, 3, 3) padded by `padding` (up to 2 a side; stride 1):
// (N, K, H + 2 padding - 2, W + 2 padding - 2) float32, as a WINOGRAD node over x padded to whole 2 x 2 tiles and
// channels-last and w's transformed filters. Any float dtypes; computed in float32.
UOpPtr winograd_correlation(const UOpPtr& x, const UOpPtr& w, const Shape& padding);

// The gradient (K, C, 3, 3) of winograd_correlation(x, w, padding)'s filters w for the gradient go of its output, by
// F(3 x 3, 2 x 2): the products of each output tile's transformed gradient and its input window's transform summed
// over the images in `chunks` chunks (a WINOGRAD_FILTER_GRAD node), then added and transformed back.
UOpPtr winograd_filter_gradient(const UOpPtr& x, const UOpPtr& go, const Shape& padding, int64_t chunks);

// The kernel that computes the WINOGRAD or WINOGRAD_FILTER_GRAD node `node` into `out` from the buffers holding its
// sources in row-major order.
Kernel lower_winograd(const BufferRef& out, const UOpPtr& node, const BufferRef& x, const BufferRef& u);

// The C source of lower_winograd's kernel, after the prelude, as function `fn`.
std::string render_winograd(const Kernel& k, const std::string& fn);

} // namespace tiny
