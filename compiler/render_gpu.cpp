#include "compiler/render_gpu.h"
#include "compiler/render_c.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace tiny {

namespace {

// ---- dialects: everything that differs between OpenCL, CUDA and HIP ----

// Vectors of {n} elements of storage type {t} (a thread's lanes): the type's name ({d}: the dtype's
// name), its declaration ({a}: its alignment in bytes; empty: built in), a load and a store at
// pointer {p} ({x}: the lanes' values, comma-separated), lane {i} of a loaded vector.
struct VectorSpec {
  const char* type;
  const char* decl;
  const char* load;
  const char* load_half; // float16 lanes read as float (vload_half); null: loaded as bits
  const char* store;
  const char* lane; // {i}: the lane's number ({h}: in hex)
  bool unaligned;   // the load and store need only the element's alignment (vloadn/vstoren)
};

// CUDA's and HIP's: an aligned struct of the elements, loaded and stored whole.
constexpr VectorSpec kStructVectors{
    "tiny_{d}x{n}",
    "struct __attribute__((aligned({a}))) {v} { {t} s[{n}]; };\n",
    "*(const {v}*)({p})",
    nullptr,
    "*({v}*)({p}) = {v}{{{x}}};",
    ".s[{i}]",
    false,
};

struct DialectSpec {
  const char* name;
  const char* header;    // defines TINY_FN, TINY_I64, bit casts, TINY_INF, TINY_NAN, tiny_bitcast
  const char* fp64;      // needed before a kernel that computes in double
  const char* kernel;    // before the kernel's name; {x} {y} {z} {n}: the work-group size
  const char* global;    // address space of buffer arguments
  const char* restrict_; // no-alias qualifier
  const char* local;     // declares work-group (shared) memory
  std::array<const char*, 3> group_id, local_id;
  const char* barrier;
  const char* long_suffix;             // of 64-bit integer literals
  std::array<const char*, 13> storage; // per DType, Bool .. UInt64: the element type in memory
  const char* u64;
  const char* math_prefix;  // before a libm name
  const char* float_suffix; // after a libm name, for float (OpenCL's are overloaded)
  bool vload_half;          // float16 loads through vload_half (no cl_khr_fp16 needed); `half*` arguments
  bool as_type;             // bit casts are as_T(x) (OpenCL), else tiny_bitcast<T>(x)
  VectorSpec vec;
};

constexpr DialectSpec kOpenCL{
    "OpenCL",
    R"(#define TINY_FN inline
#define TINY_I64 long
#define TINY_AS_UINT(x) as_uint(x)
#define TINY_AS_FLOAT(x) as_float(x)
#define TINY_RINTF(x) rint(x)
#define TINY_FABSF(x) fabs(x)
#define TINY_INF INFINITY
#define TINY_NAN NAN
)",
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n",
    "__kernel __attribute__((reqd_work_group_size({x}, {y}, {z}))) void",
    "__global ",
    "restrict",
    "__local",
    {"get_group_id(0)", "get_group_id(1)", "get_group_id(2)"},
    {"get_local_id(0)", "get_local_id(1)", "get_local_id(2)"},
    "barrier(CLK_LOCAL_MEM_FENCE);",
    "L",
    {"uchar", "char", "short", "int", "long", "uchar", "half", "ushort", "float", "double", "ushort", "uint", "ulong"},
    "ulong",
    "",
    "",
    true,
    true,
    {"{t}{n}", "", "vload{n}(0, {p})", "vload_half{n}(0, {p})", "vstore{n}(({v})({x}), 0, {p});", ".s{h}", true},
};

constexpr DialectSpec kCUDA{
    "CUDA",
    R"(#define TINY_FN __device__ inline
#define TINY_I64 long long
#define TINY_AS_UINT(x) __float_as_uint(x)
#define TINY_AS_FLOAT(x) __uint_as_float(x)
#define TINY_RINTF(x) rintf(x)
#define TINY_FABSF(x) fabsf(x)
#define TINY_INF __int_as_float(0x7f800000)
#define TINY_NAN __int_as_float(0x7fffffff)
template <class T, class F> __device__ inline T tiny_bitcast(F f) { T t; memcpy(&t, &f, sizeof t); return t; }
)",
    "",
    // (at least one block per multiprocessor: ptxas then keeps registers; with the thread bound alone
    // it capped a 224-thread convolution kernel at 32 registers and spilled on sm_80)
    "extern \"C\" __global__ void __launch_bounds__({n}, 1)",
    "",
    "__restrict__",
    "__shared__",
    {"blockIdx.x", "blockIdx.y", "blockIdx.z"},
    {"threadIdx.x", "threadIdx.y", "threadIdx.z"},
    "__syncthreads();",
    "LL",
    {"unsigned char", "signed char", "short", "int", "long long", "unsigned char", "unsigned short", "unsigned short",
     "float", "double", "unsigned short", "unsigned int", "unsigned long long"},
    "unsigned long long",
    "",
    "f",
    false,
    false,
    kStructVectors,
};

// HIP through clang builtins only, so that it compiles without the HIP headers.
constexpr DialectSpec kHIP{
    "HIP",
    R"(#define TINY_FN __attribute__((device)) inline
#define TINY_I64 long long
#define TINY_AS_UINT(x) __builtin_bit_cast(unsigned int, x)
#define TINY_AS_FLOAT(x) __builtin_bit_cast(float, x)
#define TINY_RINTF(x) __builtin_rintf(x)
#define TINY_FABSF(x) __builtin_fabsf(x)
#define TINY_INF __builtin_huge_valf()
#define TINY_NAN __builtin_nanf("")
template <class T, class F> TINY_FN T tiny_bitcast(F f) { return __builtin_bit_cast(T, f); }
)",
    "",
    "extern \"C\" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, {n})))",
    "",
    "__restrict__",
    "__attribute__((shared))",
    {"__builtin_amdgcn_workgroup_id_x()", "__builtin_amdgcn_workgroup_id_y()", "__builtin_amdgcn_workgroup_id_z()"},
    {"__builtin_amdgcn_workitem_id_x()", "__builtin_amdgcn_workitem_id_y()", "__builtin_amdgcn_workitem_id_z()"},
    "__builtin_amdgcn_fence(__ATOMIC_RELEASE, \"workgroup\"); __builtin_amdgcn_s_barrier(); "
    "__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, \"workgroup\");",
    "LL",
    {"unsigned char", "signed char", "short", "int", "long long", "unsigned char", "unsigned short", "unsigned short",
     "float", "double", "unsigned short", "unsigned int", "unsigned long long"},
    "unsigned long long",
    "__builtin_",
    "f",
    false,
    false,
    kStructVectors,
};

const DialectSpec& spec(Dialect d) {
  switch (d) {
  case Dialect::OpenCL:
    return kOpenCL;
  case Dialect::CUDA:
    return kCUDA;
  case Dialect::HIP:
    return kHIP;
  default:
    throw std::logic_error("render_gpu: the C dialect is render_c's");
  }
}

// Helpers every kernel may use, written once over the header's macros: float16/bfloat16 conversions
// with round-to-nearest-even and float exp/tanh/log, bit for bit the C renderer's (torch's rounding).
// tiny_h2f selects instead of branching: Oclgrind 21.10 ran the C renderer's branches wrongly.
constexpr const char* kPrelude = R"(TINY_FN float tiny_h2f(unsigned int h) {
  unsigned int sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  unsigned int sub = TINY_AS_UINT((float)m * 5.9604644775390625e-08f) | sign;
  unsigned int normal = sign | ((e == 31 ? 255u : e + 112) << 23) | (m << 13);
  return TINY_AS_FLOAT(e == 0 ? sub : normal);
}
TINY_FN unsigned short tiny_f2h(float f) {
  unsigned int x = TINY_AS_UINT(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  // NaN keeps its payload (a copy of float16 bits is exact); a payload below half's bits becomes quiet
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7c00 | (((ax >> 13) & 0x3ffu) ? ((ax >> 13) & 0x3ffu) : 0x200u));
  if (ax == 0x7f800000u) return (unsigned short)(sign | 0x7c00);
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00);
  if (ax < 0x38800000u) return (unsigned short)(sign | (unsigned int)TINY_RINTF(TINY_AS_FLOAT(ax) * 16777216.0f));
  ax += 0xc8000fffu + ((ax >> 13) & 1);
  return (unsigned short)(sign | (ax >> 13));
}
TINY_FN float tiny_bf2f(unsigned short b) { return TINY_AS_FLOAT((unsigned int)b << 16); }
TINY_FN unsigned short tiny_f2bf(float f) {
  unsigned int u = TINY_AS_UINT(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) & 0x7fu ? u >> 16 : (u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (unsigned short)(u >> 16);
}
TINY_FN float tiny_rh(float f) { return tiny_h2f(tiny_f2h(f)); }
TINY_FN float tiny_rbf(float f) { return tiny_bf2f(tiny_f2bf(f)); }
TINY_FN TINY_I64 tiny_ipow(TINY_I64 a, TINY_I64 b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  TINY_I64 r = 1;
  while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
  return r;
}
TINY_FN float tiny_exp_reduce(float y, int* n) {
  float k = TINY_RINTF(y * 1.44269504088896341f);
  *n = (int)(k == k ? k : 0.0f);
  float r = y - k * 0.693359375f;
  return r + k * 2.12194440e-4f;
}
TINY_FN float tiny_expf(float x) {
  float xc = x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x;
  int ni;
  float r = tiny_exp_reduce(xc, &ni);
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  int a = ni >> 1, b = ni - a;
  return p * TINY_AS_FLOAT((unsigned int)(a + 127) << 23) * TINY_AS_FLOAT((unsigned int)(b + 127) << 23);
}
TINY_FN float tiny_expm1_parts(float y, int* n) {
  float r = tiny_exp_reduce(y, n);
  float p = 1.3899713521823287e-3f;
  p = p * r + 8.365967310965061e-3f;
  p = p * r + 4.166683927178383e-2f;
  p = p * r + 1.6666549444198608e-1f;
  p = p * r + 0.5f;
  return r + r * r * p;
}
TINY_FN float tiny_tanhf(float x) {
  float a = TINY_FABSF(x), y = -2.0f * a;
  y = y < -30.0f ? -30.0f : y;
  int n;
  float q = tiny_expm1_parts(y, &n), e = TINY_AS_FLOAT((unsigned int)(n + 127) << 23), big_e = e * q + e;
  float t = a < 0.75f ? (-e * q + (1.0f - e)) / (e * q + (1.0f + e)) : 1.0f - 2.0f * big_e / (1.0f + big_e);
  return TINY_AS_FLOAT(TINY_AS_UINT(t) | (TINY_AS_UINT(x) & 0x80000000u));
}
TINY_FN float tiny_logf(float x) {
  int sub = TINY_AS_UINT(x) < 0x00800000u;
  float xs = sub ? x * 8388608.0f : x;
  unsigned int u = TINY_AS_UINT(xs);
  int e = (int)((u >> 23) & 0xffu) - 126 - (sub ? 23 : 0);
  float m = TINY_AS_FLOAT((u & 0x007fffffu) | 0x3f000000u);
  int lo = m < 0.707106781186547524f;
  e -= lo;
  m = lo ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292E-2f;
  y = y * m - 1.1514610310E-1f;
  y = y * m + 1.1676998740E-1f;
  y = y * m - 1.2420140846E-1f;
  y = y * m + 1.4249322787E-1f;
  y = y * m - 1.6668057665E-1f;
  y = y * m + 2.0000714765E-1f;
  y = y * m - 2.4999993993E-1f;
  y = y * m + 3.3333331174E-1f;
  y = y * m * z;
  float fe = (float)e;
  y = y + -2.12194440e-4f * fe;
  y = y + -0.5f * z;
  float r = m + y + 0.693359375f * fe;
  r = x == 0.0f ? -TINY_INF : r;
  r = x == TINY_INF ? TINY_INF : r;
  return x < 0.0f || x != x ? TINY_NAN : r;
}
#define TINY_IDIV(a, b) ((b) == 0 ? 0 : (b) == -1 ? -(a) : (a) / (b))
#define TINY_IMOD(a, b) ((b) == 0 || (b) == -1 ? 0 : (a) % (b))
#define TINY_IDIV_CHECKED(a, b) ((b) == 0 ? (*tiny_errors = 1, 0) : TINY_IDIV(a, b))
#define TINY_IMOD_CHECKED(a, b) ((b) == 0 ? (*tiny_errors = 1, 0) : TINY_IMOD(a, b))
#define TINY_FMAX(a, b) ((((a) != (a)) | ((b) != (b))) ? (a) + (b) : (a) < (b) ? (b) : (a))
#define TINY_FMIN(a, b) ((((a) != (a)) | ((b) != (b))) ? (a) + (b) : (b) < (a) ? (b) : (a))
)";

// libm names of the unary ops (float EXP, LOG and TANH are the prelude's, as on the CPU).
const std::unordered_map<Ops, const char*> kMath = {
    {Ops::SQRT, "sqrt"},    {Ops::EXP, "exp"},     {Ops::EXP2, "exp2"},   {Ops::LOG, "log"},     {Ops::LOG2, "log2"},
    {Ops::SIN, "sin"},      {Ops::COS, "cos"},     {Ops::TAN, "tan"},     {Ops::TANH, "tanh"},   {Ops::ERF, "erf"},
    {Ops::FLOOR, "floor"},  {Ops::CEIL, "ceil"},   {Ops::RINT, "rint"},   {Ops::TRUNC, "trunc"}, {Ops::LOG1P, "log1p"},
    {Ops::EXPM1, "expm1"},  {Ops::ASIN, "asin"},   {Ops::ACOS, "acos"},   {Ops::ATAN, "atan"},   {Ops::SINH, "sinh"},
    {Ops::COSH, "cosh"},    {Ops::ASINH, "asinh"}, {Ops::ACOSH, "acosh"}, {Ops::ATANH, "atanh"}, {Ops::ERFC, "erfc"},
    {Ops::LGAMMA, "lgamma"}};
const std::unordered_map<Ops, const char*> kFloatPrelude = {
    {Ops::EXP, "tiny_expf"}, {Ops::LOG, "tiny_logf"}, {Ops::TANH, "tiny_tanhf"}};
// Binary ops that are C operators on every dialect.
const std::unordered_map<Ops, const char*> kOperators = {
    {Ops::ADD, " + "},   {Ops::SUB, " - "},    {Ops::MUL, " * "},    {Ops::FDIV, " / "},
    {Ops::CMPLT, " < "}, {Ops::CMPLE, " <= "}, {Ops::CMPEQ, " == "}, {Ops::CMPNE, " != "},
    {Ops::AND, " & "},   {Ops::OR, " | "},     {Ops::XOR, " ^ "}};

bool is_half(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16; }
int bits(DType dt) { return static_cast<int>(itemsize(dt) * 8); }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

class GpuRenderer {
public:
  GpuRenderer(const Kernel& k, const Target& t) : k_(k), t_(t), d_(spec(t.dialect)) {}

  std::string render(const std::string& fn) {
    for (const UOpPtr& n : toposort(k_.ast)) {
      deps(n);
      for (const UOpPtr& s : n->src)
        uses_[s.get()]++;
      if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) == k_.lane_range) lane_ = n;
      if (n->op == Ops::REDUCE) reduces_.push_back(n);
      if (n->op == Ops::STAGE) stages_.push_back(n);
      f64_ = f64_ || n->dtype == DType::Float64;
    }
    f64_ = f64_ || k_.launch.f64_scalars;
    if (f64_ && !t_.fp64)
      throw std::runtime_error(std::string("tiny: kernel ") + k_.name + " computes in float64, which this " + d_.name +
                               " device does not support");
    scopes_.resize(k_.loops.size() + 1);
    for (size_t d = 0; d <= k_.loops.size(); d++) {
      scopes_[d].range = d == 0 ? -1 : kGpuRanges + static_cast<int64_t>(d - 1);
      scopes_[d].depth = static_cast<int>(d) + 1;
      open_.push_back(d);
    }
    // thread ids first: a thread past the end of the output leaves before doing anything
    std::ostringstream ids;
    for (const UOpPtr& n : toposort(k_.ast)) {
      if (n->op != Ops::RANGE || std::get<int64_t>(n->arg) >= kGpuRanges || names_.count(n.get())) continue;
      int64_t r = std::get<int64_t>(n->arg);
      std::string name = (r < kLocalRange ? "gidx" : "lidx") + std::to_string(r % 3);
      names_[n.get()] = name;
      ids << "  const " << type_of(*n) << " " << name << " = (" << type_of(*n) << ")"
          << (r < kLocalRange ? d_.group_id : d_.local_id)[r % 3] << ";\n";
    }
    if (k_.thread_valid) {
      emit(k_.thread_valid);
      scopes_[0].code << "  if (!(" << ref(k_.thread_valid) << ")) return;\n";
    }
    for (const UOpPtr& st : k_.ast->src)
      emit(st);

    std::ostringstream os;
    os << (f64_ ? d_.fp64 : "") << d_.header << kPrelude;
    for (const auto& [name, decl] : vec_decls_)
      os << decl;
    os << "\n";
    const auto& l = k_.launch.local;
    std::string kernel = replace_all(d_.kernel, "{x}", std::to_string(l[0]));
    kernel = replace_all(kernel, "{y}", std::to_string(l[1]));
    kernel = replace_all(kernel, "{z}", std::to_string(l[2]));
    kernel = replace_all(kernel, "{n}", std::to_string(l[0] * l[1] * l[2]));
    os << kernel << " " << fn << "(";
    for (size_t i = 0; i < k_.buffers.size(); i++)
      os << (i ? ", " : "") << d_.global << (static_cast<int64_t>(i) < k_.launch.outputs ? "" : "const ")
         << storage(k_.buffers[i]->dtype) << "* " << d_.restrict_ << " b" << i;
    std::string sep = k_.buffers.empty() ? "" : ", ";
    for (size_t i = 0; i < k_.ivars.size(); i++, sep = ", ")
      os << sep << type(DType::Int64) << " i" << i;
    for (size_t i = 0; i < k_.fvars.size(); i++, sep = ", ")
      os << sep << (k_.launch.f64_scalars ? "double" : "float") << " f" << i;
    // a kernel dividing a user's integers by a user's integers sets the device's error flag on a zero
    // divisor (the last argument, kGpuErrorFlag); the sync raises ZeroDivisionError
    if (checked_) os << sep << d_.global << "int* " << kGpuErrorFlag;
    os << ") {\n" << ids.str() << locals_.str() << scopes_[0].code.str();
    for (size_t d = 0; d < k_.loops.size(); d++) {
      std::string r = "r" + std::to_string(kGpuRanges + static_cast<int64_t>(d));
      os << indent(static_cast<int>(d) + 1) << "for (" << (k_.loops[d] <= INT32_MAX ? "int" : type(kIndex)) << " " << r
         << " = 0; " << r << " < " << k_.loops[d] << "; " << r << "++) {\n"
         << scopes_[d + 1].code.str();
    }
    for (size_t d = k_.loops.size(); d-- > 0;)
      os << indent(static_cast<int>(d) + 1) << "}\n";
    os << "}\n";
    return os.str();
  }

private:
  struct Scope {
    int64_t range = -1; // the loop it is the body of (-1: the function body)
    std::vector<int64_t> reduce_ranges;
    int depth = 1;
    std::ostringstream code;
  };

  const Kernel& k_;
  const Target& t_;
  const DialectSpec& d_;
  bool f64_ = false;
  bool checked_ = false; // a checked integer division: the kernel takes the error flag
  std::unordered_map<const UOp*, std::string> names_;
  std::unordered_map<const UOp*, size_t> where_;
  std::unordered_map<const UOp*, std::vector<int64_t>> deps_; // loop ids each node varies with
  std::unordered_map<const UOp*, int> uses_;                  // how many nodes read each node
  std::deque<Scope> scopes_;
  std::vector<UOpPtr> reduces_;
  std::vector<UOpPtr> stages_;
  std::vector<size_t> open_;
  std::ostringstream locals_; // tiles in local memory, declared at function scope
  int next_ = 0;
  // Lanes: a thread's adjacent outputs (k_.lanes of them), each a value of its own in registers; a
  // node that depends on the lane RANGE has a name per lane, and ref() names the lane `lane_at_`.
  UOpPtr lane_;
  int64_t lane_at_ = -1;
  std::unordered_map<const UOp*, std::vector<std::string>> lane_names_;
  std::map<std::string, std::string> vec_decls_; // vector types by name: their declarations
  std::vector<UOpPtr> keep_;                     // nodes named here that the kernel does not hold

  static std::string indent(int depth) { return std::string(2 * depth, ' '); }
  const std::string& ref(const UOpPtr& n) {
    auto it = lane_names_.find(n.get());
    if (it == lane_names_.end()) return names_.at(n.get());
    if (lane_at_ < 0) throw std::logic_error("render_gpu: a lane's value read outside its lane");
    return it->second.at(static_cast<size_t>(lane_at_));
  }
  bool in_lanes(const UOpPtr& n) {
    const auto& d = deps(n);
    return k_.lane_range >= 0 && std::find(d.begin(), d.end(), k_.lane_range) != d.end();
  }

  std::string storage(DType dt) const { return d_.storage.at(static_cast<size_t>(dt)); }
  // The type a value lives in: float16/bfloat16 compute in float, as on the CPU.
  // Index math in 32 bits where its bounds allow (GPUs do 64-bit integer math in several
  // instructions): an int64 node whose every value fits an int is computed as one. Data (loads,
  // reductions, arguments) has unknown bounds and stays 64-bit.
  static bool fits_int(const UOp& n) { return n.vmin >= INT32_MIN && n.vmax <= INT32_MAX; }
  std::string type_of(const UOp& n) const { return n.dtype == kIndex && fits_int(n) ? "int" : type(n.dtype); }

  std::string type(DType dt) const {
    if (is_half(dt)) return "float";
    if (dt == DType::Bool) return "bool";
    return storage(dt);
  }

  std::string literal(const UOpPtr& c) const {
    DType dt = c->dtype;
    char buf[64];
    if (is_float(dt)) {
      double v = c->const_f();
      std::string cast = dt == DType::Float64 ? "(double)" : "";
      if (std::isnan(v)) return "(" + cast + "TINY_NAN)";
      if (std::isinf(v)) return std::string("(") + (v < 0 ? "-" : "") + cast + "TINY_INF)";
      std::snprintf(buf, sizeof buf, dt == DType::Float64 ? "%.17e" : "%.9ef", v);
      return buf;
    }
    int64_t v = c->const_i();
    if (dt == DType::Bool) return v ? "true" : "false";
    if (dt == kIndex && fits_int(*c)) return std::to_string(v); // an int: index math stays 32-bit
    if (dt == DType::UInt64) { // its bit pattern: above INT64_MAX the int64_t is negative
      std::snprintf(buf, sizeof buf, "((%s)%lluU%s)", type(dt).c_str(), static_cast<unsigned long long>(v),
                    d_.long_suffix);
      return buf;
    }
    if (v == INT64_MIN) return std::string("(-9223372036854775807") + d_.long_suffix + " - 1)";
    std::snprintf(buf, sizeof buf, "((%s)%lld%s)", type(dt).c_str(), static_cast<long long>(v), d_.long_suffix);
    return buf;
  }

  std::string math(Ops op, DType dt, const std::string& args) const {
    if (dt != DType::Float64)
      if (auto it = kFloatPrelude.find(op); it != kFloatPrelude.end())
        return std::string(it->second) + "(" + args + ")";
    auto it = kMath.find(op);
    if (it == kMath.end()) throw std::logic_error(std::string("render_gpu: no math function for ") + op_name(op));
    return std::string(d_.math_prefix) + it->second + (dt == DType::Float64 ? "" : d_.float_suffix) + "(" + args + ")";
  }

  std::string libm2(const char* fn, DType dt, const std::string& a, const std::string& b) const {
    return std::string(d_.math_prefix) + fn + (dt == DType::Float64 ? "" : d_.float_suffix) + "(" + a + ", " + b + ")";
  }

  // Contraction. The CPU device's kernels are compiled with -ffp-contract=fast, and torch's CPU kernels
  // are contracted the same way: on x86, LLVM fuses a float multiply whose only use is an add or a
  // subtract into one fma, rounding once. OpenCL contracts only within one expression, and the renderer
  // writes each node as its own statement, so it fuses those pairs itself (linspace's start + step * i
  // was one ulp off the CPU on CL at some points). The product to fuse into an ADD or SUB n, or null.
  // A float sum's accumulate (acc + x * y) is such an add too.
  const UOp* fused_product(const UOp& n) const {
    bool sum = n.op == Ops::REDUCE && n.reduce_arg().op == Ops::ADD;
    if ((n.op != Ops::ADD && n.op != Ops::SUB && !sum) || (n.dtype != DType::Float32 && n.dtype != DType::Float64))
      return nullptr;
    for (size_t i = 0; i < (sum ? 1 : n.src.size()); i++) { // LLVM tries the first operand first
      const UOp* s = n.src[i].get();
      if (s->op == Ops::MUL && s->dtype == n.dtype && uses_.at(s) == 1) return s;
    }
    return nullptr;
  }

  // n = x * y + c, x * y - c or c - x * y (p = x * y, one of n's sources) as one fma.
  std::string fma(const UOp& n, const UOp& p, const std::string& c) {
    std::string x = ref(p.src[0]), y = ref(p.src[1]);
    bool negate_product = n.op == Ops::SUB && n.src[1].get() == &p;
    bool negate_c = n.op == Ops::SUB && !negate_product;
    return std::string(d_.math_prefix) + "fma" + (n.dtype == DType::Float64 ? "" : d_.float_suffix) + "(" +
           (negate_product ? "-(" + x + ")" : x) + ", " + y + ", " + (negate_c ? "-(" + c + ")" : c) + ")";
  }

  // Emits n's sources, or a fused product's sources in its place.
  void emit_sources(const UOp& n) {
    const UOp* product = fused_product(n);
    for (const UOpPtr& s : n.src)
      if (s.get() == product)
        for (const UOpPtr& f : s->src)
          emit(f);
      else
        emit(s);
  }

  std::string unary(Ops op, DType dt, const std::string& a) const {
    switch (op) {
    case Ops::NEG:
      return dt == DType::Bool ? "!" + a : "-" + a;
    case Ops::NOT:
      return "!" + a;
    case Ops::BITNOT:
      return dt == DType::Bool ? "!" + a : "~" + a;
    case Ops::ABS:
      if (is_unsigned(dt)) return a;
      return is_float(dt)
                 ? std::string(d_.math_prefix) + "fabs" + (dt == DType::Float64 ? "" : d_.float_suffix) + "(" + a + ")"
                 : "(" + a + " < 0 ? -" + a + " : " + a + ")";
    case Ops::RECIP:
      return std::string(dt == DType::Float64 ? "1.0" : "1.0f") + " / " + a;
    default:
      return math(op, dt, a);
    }
  }

  std::string binary(Ops op, DType dt, DType in, const std::string& a, const std::string& b) const {
    bool fl = is_float(in);
    // uint16 operands promote to int, whose product can pass INT_MAX: multiply as unsigned
    if (op == Ops::MUL && in == DType::UInt16) return "(" + type(DType::UInt32) + ")" + a + " * " + b;
    if (auto it = kOperators.find(op); it != kOperators.end()) return a + it->second + b;
    switch (op) {
    case Ops::IDIV:
      return is_unsigned(in) ? unsigned_division(op, a, b, "0") : "TINY_IDIV(" + a + ", " + b + ")";
    case Ops::MOD:
      if (is_unsigned(in)) return unsigned_division(op, a, b, "0");
      return fl ? libm2("fmod", in, a, b) : "TINY_IMOD(" + a + ", " + b + ")";
    case Ops::POW:
      return fl ? libm2("pow", in, a, b) : "tiny_ipow(" + a + ", " + b + ")";
    case Ops::ATAN2:
      return libm2("atan2", in, a, b);
    case Ops::MAX:
      return fl ? "TINY_FMAX(" + a + ", " + b + ")" : "(" + a + " > " + b + " ? " + a + " : " + b + ")";
    case Ops::MIN:
      return fl ? "TINY_FMIN(" + a + ", " + b + ")" : "(" + a + " < " + b + " ? " + a + " : " + b + ")";
    case Ops::SHL: {
      // torch: shifting by a negative amount or by the width or more gives 0
      std::string w = std::to_string(bits(dt));
      return "(" + b + " < 0 || " + b + " >= " + w + " ? 0 : (" + type(dt) + ")((" + d_.u64 + ")" + a + " << " + b +
             "))";
    }
    case Ops::SHR: {
      std::string w = std::to_string(bits(dt));
      return "(" + b + " < 0 || " + b + " >= " + w + " ? (" + a + " < 0 ? -1 : 0) : " + a + " >> " + b + ")";
    }
    default:
      throw std::logic_error(std::string("render_gpu: no binary ") + op_name(op));
    }
  }

  std::string round_to(DType dt, const std::string& e) const {
    if (dt == DType::Float16) return "tiny_rh(" + e + ")";
    if (dt == DType::BFloat16) return "tiny_rbf(" + e + ")";
    return e;
  }
  std::string to_bits(DType dt, const std::string& e) const {
    if (dt == DType::Float16) return "tiny_f2h(" + e + ")";
    if (dt == DType::BFloat16) return "tiny_f2bf(" + e + ")";
    return e;
  }
  std::string from_bits(DType dt, const std::string& e) const {
    if (dt == DType::Float16) return "tiny_h2f(" + e + ")";
    if (dt == DType::BFloat16) return "tiny_bf2f(" + e + ")";
    return e;
  }

  std::string cast(DType from, DType to, const std::string& a) const {
    if (to == DType::Bool) return "(" + a + " != 0)";
    if (is_float(to)) return is_half(to) ? round_to(to, "(float)" + a) : "(" + type(to) + ")" + a;
    if (is_float(from) && (to == DType::UInt32 || to == DType::UInt64))
      return float_to_unsigned(a, from, to, type(to), type(DType::Int32), type(DType::Int64));
    if (is_float(from))
      return float_to_int(a, from == DType::Float64, itemsize(to) == 8, type(to), type(DType::Int32),
                          type(DType::Int64));
    return "(" + type(to) + ")" + a;
  }

  std::string bitcast(DType from, DType to, const std::string& a) const {
    if (itemsize(from) != itemsize(to))
      throw std::logic_error("render_gpu: no BITCAST from " + std::string(name(from)) + " to " + std::string(name(to)));
    // a bool's byte is 0 or 1
    if (to == DType::Bool) return "(" + a + " != 0)";
    if (from == DType::Bool) return "(" + type(to) + ")" + a;
    // half types are bits in memory (an unsigned short), float in registers
    std::string bits_type = is_half(to) ? (d_.as_type ? "ushort" : "unsigned short") : storage(to);
    // an int64 constant that fits an int renders as a bare int (index math stays 32-bit): reinterpreting
    // it needs its own width (OpenCL's as_double(1) does not compile)
    std::string x = to_bits(from, is_float(from) ? a : "((" + storage(from) + ")" + a + ")");
    std::string b = d_.as_type ? "as_" + bits_type + "(" + x + ")" : "tiny_bitcast<" + bits_type + ">(" + x + ")";
    return from_bits(to, b);
  }

  std::string reduce_identity(Ops op, DType dt) const {
    UOpPtr c;
    bool fl = is_float(dt);
    switch (op) {
    case Ops::ADD:
      c = fl ? const_float(dt, 0) : const_int(dt, 0);
      break;
    case Ops::MUL:
      c = fl ? const_float(dt, 1) : const_int(dt, 1);
      break;
    case Ops::XOR:
      c = const_int(dt, 0);
      break;
    case Ops::MAX:
    case Ops::MIN: {
      bool max = op == Ops::MAX;
      if (fl)
        c = const_float(dt, max ? -INFINITY : INFINITY);
      else if (dt == DType::Bool)
        c = const_int(dt, max ? 0 : 1);
      else if (!info(dt).is_signed) // the largest: all ones (uint64's bit pattern is -1)
        c = const_int(dt, max ? 0 : static_cast<int64_t>(UINT64_MAX >> (64 - bits(dt))));
      else {
        int64_t top = bits(dt) == 64 ? INT64_MAX : (int64_t{1} << (bits(dt) - 1)) - 1;
        c = const_int(dt, max ? -top - 1 : top);
      }
      break;
    }
    default:
      throw std::logic_error("render_gpu: bad reduce op");
    }
    return literal(c);
  }

  std::string combine(Ops op, DType dt, const std::string& acc, const std::string& v) const {
    switch (op) {
    case Ops::ADD:
      return dt == DType::Bool ? acc + " | " + v : acc + " + " + v;
    case Ops::MUL:
      return dt == DType::Bool ? acc + " & " + v : acc + " * " + v;
    case Ops::XOR:
      return acc + " ^ " + v;
    case Ops::MAX:
    case Ops::MIN:
      return binary(op, dt, dt, acc, v);
    default:
      throw std::logic_error("render_gpu: bad reduce op");
    }
  }

  // ---- placement: each node goes in the innermost open loop among those it depends on ----

  const std::vector<int64_t>& deps(const UOpPtr& n) {
    if (auto it = deps_.find(n.get()); it != deps_.end()) return it->second;
    std::vector<int64_t> d;
    // thread ids are not loops: a node that depends on them only lives in the function body
    if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) >= kGpuRanges) d.push_back(std::get<int64_t>(n->arg));
    for (const UOpPtr& s : n->src)
      for (int64_t r : deps(s))
        if (std::find(d.begin(), d.end(), r) == d.end()) d.push_back(r);
    if (n->op == Ops::REDUCE)
      for (size_t i = 1; i < n->src.size(); i++)
        std::erase(d, std::get<int64_t>(n->src[i]->arg));
    if (n->op == Ops::STAGE) std::erase(d, std::get<int64_t>(n->src[0]->arg));
    // A load of the buffer the kernel stores into (a scatter that accumulates) sees the stores of
    // earlier iterations: it stays in the innermost loop even when its index is loop-invariant.
    if (n->op == Ops::LOAD && n->src[0]->op == Ops::PARAM && std::get<int64_t>(n->src[0]->arg) == 0)
      for (size_t r = 0; r < k_.loops.size(); r++)
        if (std::find(d.begin(), d.end(), kGpuRanges + static_cast<int64_t>(r)) == d.end())
          d.push_back(kGpuRanges + static_cast<int64_t>(r));
    return deps_[n.get()] = std::move(d);
  }

  bool scope_has(const Scope& sc, const std::vector<int64_t>& deps) const {
    for (int64_t r : deps)
      if (r == sc.range || std::find(sc.reduce_ranges.begin(), sc.reduce_ranges.end(), r) != sc.reduce_ranges.end())
        return true;
    return false;
  }

  size_t home(const UOpPtr& n) {
    const auto& d = deps(n);
    for (size_t i = open_.size(); i-- > 1;)
      if (scope_has(scopes_[open_[i]], d)) return i;
    return 0;
  }

  // A node computed in a loop body that has closed is computed again where it is needed next.
  bool visible(const UOpPtr& n) {
    auto it = names_.find(n.get());
    if (it == names_.end()) return false;
    auto w = where_.find(n.get());
    if (w == where_.end() || std::find(open_.begin(), open_.end(), w->second) != open_.end()) return true;
    names_.erase(it);
    where_.erase(w);
    return false;
  }

  // Source i of n; a 32-bit index widened where n is computed in 64 bits (its bounds are unknown, so
  // the 32-bit arithmetic could overflow).
  std::string operand(const UOpPtr& n, size_t i) {
    const UOpPtr& x = n->src[i];
    bool narrow = x->dtype == kIndex && fits_int(*x) && !x->is_const();
    return narrow && n->dtype == kIndex && !fits_int(*n) ? "((" + type(kIndex) + ")" + ref(x) + ")" : ref(x);
  }

  std::string load(DType dt, const std::string& buf, const std::string& idx) const {
    if (dt == DType::Float16 && d_.vload_half) return "vload_half(" + idx + ", " + buf + ")";
    std::string x = buf + "[" + idx + "]";
    return dt == DType::Bool ? "(" + x + " != 0)" : from_bits(dt, x);
  }

  // float16 stores write tiny_f2h's bits on every dialect: vstore_half_rte rounds the same but writes
  // NaN as it likes (PoCL: 0x7fff; torch: 0x7e00).
  std::string store(DType dt, const std::string& buf, const std::string& idx, const std::string& v) const {
    return store_pointer(dt, buf) + "[" + idx + "] = " + to_bits(dt, v) + ";";
  }

  void emit(const UOpPtr& n) {
    if (visible(n)) return;
    switch (n->op) {
    case Ops::CONST:
      names_[n.get()] = literal(n);
      return;
    case Ops::RANGE:
      names_[n.get()] = "r" + std::to_string(std::get<int64_t>(n->arg));
      if (std::get<int64_t>(n->arg) == k_.lane_range)
        for (int64_t l = 0; l < k_.lanes; l++)
          lane_names_[n.get()].push_back(std::to_string(l));
      return;
    case Ops::PARAM:
      names_[n.get()] = "b" + std::to_string(std::get<int64_t>(n->arg));
      return;
    case Ops::ARG:
      names_[n.get()] = "((" + type(n->dtype) + ")" + (is_float(n->dtype) ? "f" : "i") +
                        std::to_string(std::get<int64_t>(n->arg)) + ")";
      return;
    case Ops::REDUCE:
      return emit_reduce(n);
    case Ops::STAGE:
      return emit_stage(n);
    default:
      break;
    }
    // lanes reading or writing adjacent elements: one vector access (its index per lane unused)
    if ((n->op == Ops::LOAD || n->op == Ops::STORE) && in_lanes(n) &&
        (n->op == Ops::LOAD ? vector_load(n) : vector_store(n)))
      return;
    emit_sources(*n);
    Scope& sc = scopes_[open_[home(n)]];
    std::string ind = indent(sc.depth);
    if (n->op == Ops::STORE) {
      for (int64_t l = 0; l < (in_lanes(n) ? k_.lanes : 1); l++) {
        lane_at_ = in_lanes(n) ? l : -1;
        sc.code << ind;
        if (n->src.size() > 3) sc.code << "if (" << ref(n->src[3]) << ") ";
        sc.code << store(n->src[2]->dtype, ref(n->src[0]), ref(n->src[1]), ref(n->src[2])) << "\n";
      }
      lane_at_ = -1;
      return;
    }
    where_[n.get()] = open_[home(n)];
    if (in_lanes(n)) {
      names_[n.get()] = "lanes";
      std::vector<std::string> lanes;
      for (int64_t l = 0; l < k_.lanes; l++) {
        lane_at_ = l;
        lanes.push_back(define(n, sc, expr(n)));
      }
      lane_at_ = -1;
      lane_names_[n.get()] = std::move(lanes);
      return;
    }
    names_[n.get()] = define(n, sc, expr(n));
  }

  // Defines a register holding n's value e (of n's type) in scope sc: its name.
  std::string define(const UOpPtr& n, Scope& sc, const std::string& e) {
    std::string v = "v" + std::to_string(next_++);
    // Narrow ints are promoted by C; store them back in their own width so they wrap as torch's do.
    sc.code << indent(sc.depth) << "const " << type_of(*n) << " " << v << " = (" << type_of(*n) << ")(" << e << ");\n";
    return v;
  }

  // The C expression of n's value over its sources' names.
  std::string expr(const UOpPtr& n) {
    std::string e;
    if (n->op == Ops::LOAD) {
      e = load(n->dtype, ref(n->src[0]), ref(n->src[1]));
      if (n->src.size() > 2) e = ref(n->src[2]) + " ? " + e + " : 0";
    } else if (n->op == Ops::WHERE) {
      e = ref(n->src[0]) + " ? " + operand(n, 1) + " : " + operand(n, 2);
    } else if (n->op == Ops::CAST) {
      e = cast(n->src[0]->dtype, n->dtype, ref(n->src[0]));
    } else if (n->op == Ops::BITCAST) {
      e = bitcast(n->src[0]->dtype, n->dtype, operand(n, 0));
    } else if (is_unary(n->op)) {
      e = round_to(n->dtype, unary(n->op, n->src[0]->dtype, operand(n, 0)));
    } else if (is_checked_division(n)) {
      checked_ = true;
      e = is_unsigned(n->dtype) ? unsigned_division(n->op, operand(n, 0), operand(n, 1), "(*tiny_errors = 1, 0)")
                                : std::string(n->op == Ops::IDIV ? "TINY_IDIV_CHECKED(" : "TINY_IMOD_CHECKED(") +
                                      operand(n, 0) + ", " + operand(n, 1) + ")";
    } else if (const UOp* p = fused_product(*n)) {
      e = fma(*n, *p, ref(n->src[n->src[0].get() == p ? 1 : 0]));
    } else if (is_binary(n->op)) {
      e = round_to(n->dtype, binary(n->op, n->dtype, n->src[0]->dtype, operand(n, 0), operand(n, 1)));
    } else {
      throw std::logic_error(std::string("render_gpu: cannot render ") + op_name(n->op));
    }
    return e;
  }

  // ---- vector accesses: a thread's lanes read or written as one vector ----

  // The vector type of `lanes` elements of dtype dt stored as C type t, declared where the dialect
  // needs it (aligned to its size, up to 16 bytes).
  std::string vec_type(DType dt, const std::string& t) {
    std::string n = std::to_string(k_.lanes);
    std::string v =
        replace_all(replace_all(replace_all(d_.vec.type, "{t}", t), "{n}", n), "{d}", std::string(name(dt)));
    if (*d_.vec.decl && !vec_decls_.count(v)) {
      int64_t align = std::min<int64_t>(16, k_.lanes * static_cast<int64_t>(itemsize(dt)));
      std::string decl = replace_all(replace_all(d_.vec.decl, "{v}", v), "{t}", t);
      vec_decls_[v] = replace_all(replace_all(decl, "{n}", n), "{a}", std::to_string(align));
    }
    return v;
  }

  // The base of a vector access at idx (lane l at base + l), emitted; empty when its lanes are not
  // adjacent, or not aligned where the dialect needs it.
  std::string vector_base(const UOpPtr& idx) {
    auto split = lane_split(idx, lane_.get());
    if (!split || split->second != 1) return "";
    if (!d_.vec.unaligned && index_alignment(split->first) % k_.lanes != 0) return "";
    // names are by node address: the base (a new node when it sums terms) lives as long as its name
    keep_.push_back(split->first);
    emit(split->first);
    return ref(split->first);
  }

  // The pointer a float16 store writes through: bits, as unsigned 16-bit integers (see store()).
  std::string store_pointer(DType dt, const std::string& buf) const {
    return dt == DType::Float16 && d_.vload_half ? "((" + std::string(d_.global) + "ushort*)" + buf + ")" : buf;
  }
  std::string store_type(DType dt) const { return dt == DType::Float16 && d_.vload_half ? "ushort" : storage(dt); }

  // A load whose lanes read adjacent elements (not masked): one vector load, then a register per lane.
  bool vector_load(const UOpPtr& n) {
    if (n->src.size() > 2) return false;
    std::string base = vector_base(n->src[1]);
    if (base.empty()) return false;
    emit(n->src[0]);
    Scope& sc = scopes_[open_[home(n)]];
    names_[n.get()] = "lanes";
    where_[n.get()] = open_[home(n)];
    DType dt = n->dtype;
    bool as_float = dt == DType::Float16 && d_.vec.load_half;
    std::string vt = vec_type(dt, as_float ? "float" : storage(dt)), x = "x" + std::to_string(next_++);
    std::string p = ref(n->src[0]) + " + " + base;
    sc.code << indent(sc.depth) << "const " << vt << " " << x << " = "
            << replace_all(
                   replace_all(replace_all(as_float ? d_.vec.load_half : d_.vec.load, "{n}", std::to_string(k_.lanes)),
                               "{v}", vt),
                   "{p}", p)
            << ";\n";
    std::vector<std::string> lanes;
    for (int64_t l = 0; l < k_.lanes; l++) {
      char hex[24];
      std::snprintf(hex, sizeof hex, "%llX", static_cast<unsigned long long>(l));
      std::string lane = x + replace_all(replace_all(d_.vec.lane, "{i}", std::to_string(l)), "{h}", hex);
      std::string e = dt == DType::Bool ? "(" + lane + " != 0)" : as_float ? lane : from_bits(dt, lane);
      lanes.push_back(define(n, sc, e));
    }
    lane_names_[n.get()] = std::move(lanes);
    return true;
  }

  // A store whose lanes write adjacent elements (unconditionally): one vector store.
  bool vector_store(const UOpPtr& n) {
    if (n->src.size() > 3) return false;
    std::string base = vector_base(n->src[1]);
    if (base.empty()) return false;
    emit(n->src[0]);
    emit(n->src[2]);
    Scope& sc = scopes_[open_[home(n)]];
    DType dt = n->src[2]->dtype;
    std::string t = store_type(dt), values;
    for (int64_t l = 0; l < k_.lanes; l++) {
      lane_at_ = l;
      values += (l ? ", (" : "(") + t + ")(" + to_bits(dt, ref(n->src[2])) + ")";
    }
    lane_at_ = -1;
    std::string st = d_.vec.store;
    st = replace_all(st, "{v}", vec_type(dt, t));
    st = replace_all(st, "{n}", std::to_string(k_.lanes));
    st = replace_all(st, "{p}", store_pointer(dt, ref(n->src[0])) + " + " + base);
    sc.code << indent(sc.depth) << replace_all(st, "{x}", values) << "\n";
    return true;
  }

  // A REDUCE and every other not-yet-emitted REDUCE over the same loop variables in the same scope
  // accumulate in one loop. A thread id among the ranges makes it a grouped reduce: each thread's
  // partial result goes to local memory and a tree of halving steps, with a barrier after each,
  // combines them; every thread then reads the result.
  void emit_reduce(const UOpPtr& n) {
    size_t at = home(n);
    Scope& target = scopes_[open_[at]];
    std::vector<UOpPtr> group;
    for (const UOpPtr& m : reduces_)
      if (!names_.count(m.get()) && std::equal(m->src.begin() + 1, m->src.end(), n->src.begin() + 1, n->src.end()) &&
          home(m) == at)
        group.push_back(m);
    std::vector<UOpPtr> loops;
    UOpPtr lane;
    for (size_t i = 1; i < n->src.size(); i++)
      if (std::get<int64_t>(n->src[i]->arg) < kGpuRanges)
        lane = n->src[i];
      else
        loops.push_back(n->src[i]);
    // barriers must be reached by every thread: a grouped reduce is never inside a loop or a branch
    if (lane && open_[at] != 0) throw std::logic_error("render_gpu: a grouped reduce inside a loop");
    Scope& body = scopes_.emplace_back();
    body.depth = target.depth + static_cast<int>(loops.size());
    for (const UOpPtr& r : loops)
      body.reduce_ranges.push_back(std::get<int64_t>(r->arg));
    std::vector<size_t> saved = open_;
    open_.resize(at + 1);
    open_.push_back(scopes_.size() - 1);
    for (const UOpPtr& m : group)
      if (fused_product(*m))
        emit_sources(*m->src[0]);
      else
        emit(m->src[0]);
    if (lane) emit(lane);
    open_ = saved;

    std::string ind = indent(target.depth);
    std::vector<std::string> accs;
    for (const UOpPtr& m : group) {
      accs.push_back("acc" + std::to_string(next_++));
      target.code << ind << type(m->dtype) << " " << accs.back() << " = "
                  << reduce_identity(m->reduce_arg().op, m->dtype) << ";\n";
    }
    for (size_t i = 0; i < loops.size(); i++) {
      std::string rn = "r" + std::to_string(std::get<int64_t>(loops[i]->arg));
      target.code << indent(target.depth + static_cast<int>(i)) << "for (" << type_of(*loops[i]) << " " << rn
                  << " = 0; " << rn << " < " << loops[i]->src[0]->const_i() << "; " << rn << "++) {\n";
    }
    target.code << body.code.str();
    for (size_t g = 0; g < group.size(); g++) {
      const UOpPtr& m = group[g];
      const UOp* p = fused_product(*m);
      target.code << indent(body.depth) << accs[g] << " = (" << type(m->dtype) << ")("
                  << (p ? fma(*m, *p, accs[g]) : combine(m->reduce_arg().op, m->dtype, accs[g], ref(m->src[0])))
                  << ");\n";
    }
    for (size_t i = loops.size(); i-- > 0;)
      target.code << indent(target.depth + static_cast<int>(i)) << "}\n";
    for (size_t g = 0; g < group.size(); g++) {
      const UOpPtr& m = group[g];
      where_[m.get()] = open_[at];
      names_[m.get()] = accs[g];
      if (lane) emit_tree(m, accs[g], ref(lane), lane->src[0]->const_i(), target);
    }
  }

  // Tiles the work-group's threads fill together, thread t every n-th element from t: every tile not
  // yet filled at this place, between one barrier before (the previous tiles' readers are done) and
  // one after (every element is written). Local memory is declared at function scope (OpenCL allows
  // it nowhere else).
  void emit_stage(const UOpPtr& n) {
    size_t at = home(n);
    Scope& target = scopes_[open_[at]];
    std::string ind = indent(target.depth);
    target.code << ind << d_.barrier << "\n";
    for (const UOpPtr& m : stages_)
      if (!names_.count(m.get()) && home(m) == at) fill_tile(m, at, target);
    target.code << ind << d_.barrier << "\n";
  }

  void fill_tile(const UOpPtr& n, size_t at, Scope& target) {
    const UOpPtr& fill = n->src[0];
    Scope& body = scopes_.emplace_back();
    body.depth = target.depth + 1;
    body.reduce_ranges.push_back(std::get<int64_t>(fill->arg));
    std::vector<size_t> saved = open_;
    open_.resize(at + 1);
    open_.push_back(scopes_.size() - 1);
    for (size_t i = 1; i < n->src.size(); i++)
      emit(n->src[i]);
    std::string value = ref(n->src[1]) + "[" + ref(n->src[2]) + "]";
    if (n->src.size() > 3) value = ref(n->src[3]) + " ? " + value + " : 0";
    open_ = saved;

    const auto& l = k_.launch.local;
    std::string sm = "tile" + std::to_string(next_++), fn = "r" + std::to_string(std::get<int64_t>(fill->arg));
    std::string lid = std::string("(int)") + d_.local_id[0] + " + " + std::to_string(l[0]) + " * ((int)" +
                      d_.local_id[1] + " + " + std::to_string(l[1]) + " * (int)" + d_.local_id[2] + ")";
    int64_t size = std::get<int64_t>(n->arg);
    locals_ << "  " << d_.local << " " << storage(n->dtype) << " " << sm << "[" << size << "];\n";
    std::string ind = indent(target.depth);
    target.code << ind << "for (int " << fn << " = " << lid << "; " << fn << " < " << size << "; " << fn
                << " += " << l[0] * l[1] * l[2] << ") {\n"
                << body.code.str() << indent(body.depth) << sm << "[" << fn << "] = " << value << ";\n"
                << ind << "}\n";
    names_[n.get()] = sm;
    where_[n.get()] = open_[at];
  }

  void emit_tree(const UOpPtr& m, const std::string& acc, const std::string& lid, int64_t width, Scope& sc) {
    std::string ind = indent(sc.depth), t = type(m->dtype), sm = "sm" + std::to_string(next_++);
    std::string st = m->dtype == DType::Bool ? storage(DType::Bool) : t; // local memory holds no bool
    std::string r = "red" + std::to_string(next_++);
    sc.code << ind << d_.local << " " << st << " " << sm << "[" << width << "];\n"
            << ind << sm << "[" << lid << "] = " << acc << ";\n"
            << ind << d_.barrier << "\n"
            << ind << "for (int s = " << width / 2 << "; s > 0; s >>= 1) {\n"
            << ind << "  if (" << lid << " < s) " << sm << "[" << lid << "] = (" << st << ")("
            << combine(m->reduce_arg().op, m->dtype, "(" + t + ")" + sm + "[" + lid + "]",
                       "(" + t + ")" + sm + "[" + lid + " + s]")
            << ");\n"
            << ind << "  " << d_.barrier << "\n"
            << ind << "}\n"
            << ind << "const " << t << " " << r << " = (" << t << ")" << sm << "[0];\n";
    names_[m.get()] = r;
  }
};

} // namespace

std::string render_gpu(const Kernel& k, const std::string& fn_name, const Target& target) {
  if (k.winograd) throw std::logic_error("render_gpu: a Winograd convolution kernel is the CPU's alone");
  return GpuRenderer(k, target).render(fn_name);
}

} // namespace tiny
