#pragma once
// TINY_DEBUG levels: 1 a line per sync, 2 a line per kernel (a GPU device waits for each, to time it), 3 generated
// source, 4 UOp graphs.

namespace tiny::runtime {
int debug_level();
} // namespace tiny::runtime
