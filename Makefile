# tiny: the two commands are `make demo` and `make test`. Each installs what is missing (Debian packages,
# the .venv), builds (the core with CMake, then the torch extension), and runs. Run again, they skip what
# is already installed and built. Internal targets: setup, build, format, lint, clean.

SHELL := /bin/bash
.DEFAULT_GOAL := build

PY := .venv/bin/python
PIP := .venv/bin/pip
JOBS ?= $(shell nproc)
STAMPS := build/stamps

APT_PACKAGES := g++ cmake ninja-build ccache libgtest-dev clang dataset-fashion-mnist pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clang-19 lld-19 libamdhip64-5 rocm-device-libs
PIP_PACKAGES := torch==2.14.1 torchvision==0.29.1 pytest ruff numpy ninja
SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)

CXX_SOURCES = $(wildcard compiler/*.h compiler/*.cpp runtime/*.h runtime/*.cpp csrc/*.h csrc/*.cpp \
                         aten_ops/*.h aten_ops/*.cpp tests/*.h tests/*.cpp)

.PHONY: demo test test-upstream test-oclgrind test-gpu-compile build setup core extension sanitize sanitize-core format lint clean

# The demo, short: 40 training steps of the Fashion-MNIST CNN on tiny, accuracy on 20 test batches, the
# loss curve in mnist_loss.png (a few minutes). The whole epoch: .venv/bin/python examples/mnist.py
demo: build
	$(PY) examples/mnist.py --steps 40 --test-batches 20

# CTest (also under ASan + UBSan: sanitize-core), pytest, then the upstream OpInfo suite's CI slice
# (float32: forward natively and with the CPU fallback, backward natively; each test's first 32 samples;
# about 6 minutes, README).
test: build sanitize-core $(STAMPS)/upstream
	ctest --test-dir build/cmake --output-on-failure
	$(PY) -m pytest -q torch_tests --ignore=torch_tests/upstream || [ $$? -eq 5 ]  # 5: no tests collected
	TINY_DEVICE=CL $(PY) -m pytest -q $(filter-out $(GPU_CHECK_TESTS),$(CL_TESTS))
	$(GPU_CHECK_ENV) $(PY) -m pytest -q -p no:cacheprovider $(GPU_CHECK_TESTS)
	$(PY) torch_tests/upstream/run.py --slice ci

# The CL device (TINY_DEVICE=CL, on PoCL here): CL_TESTS, a fixed part of torch_tests, runs in `make test`;
# test-cl runs the whole suite. Both skip, saying why, where there is no OpenCL library or device.
CL_TESTS := torch_tests/test_reduce.py torch_tests/test_matmul.py torch_tests/test_views.py \
            torch_tests/test_inplace.py torch_tests/test_index.py \
            torch_tests/test_elementwise.py::test_binary_op_with_broadcast_tensor_matches_cpu \
            torch_tests/test_elementwise.py::test_unary_op_matches_cpu \
            torch_tests/test_training.py::test_twenty_training_steps_match_cpu_losses_and_final_weights \
            torch_tests/test_training.py::test_demo_model_training_step_runs_without_fallbacks \
            torch_tests/test_errors.py::test_integer_division_by_zero_raises_at_the_sync_that_computes_it \
            torch_tests/test_silent_errors.py::test_bool_view_of_bytes_other_than_0_and_1_reads_them_as_true \
            torch_tests/test_silent_errors.py::test_a_float_cast_out_of_the_int_range_gives_the_cpus_value \
            torch_tests/test_profiler.py::test_fused_chain_is_one_kernel_event_inside_the_sync_that_ran_it \
            torch_tests/test_profiler.py::test_training_step_shows_every_kernel_it_runs \
            torch_tests/test_unsigned.py::test_values_above_the_signed_range_survive_the_round_trip_to_the_cpu \
            torch_tests/test_unsigned.py::test_a_float_cast_out_of_range_gives_the_cpus_value \
            torch_tests/test_unsigned.py::test_mul_wraps_in_the_dtype_as_on_the_cpu \
            torch_tests/test_unsigned.py::test_eq_and_ne_compare_the_whole_unsigned_value \
            torch_tests/test_unsigned.py::test_sums_and_products_accumulate_in_int64_as_on_the_cpu \
            torch_tests/test_unsigned.py::test_sort_orders_values_above_the_signed_range_last
.PHONY: test-cl
test-cl: build
	TINY_DEVICE=CL $(PY) -m pytest -q torch_tests --ignore=torch_tests/upstream

# The whole upstream OpInfo suite: every dtype and test kind, natively and with the CPU fallback (README).
test-upstream: build $(STAMPS)/upstream
	$(PY) torch_tests/upstream/run.py --slice full

# TINY_GPU_COMPILE_CHECK (runtime/gpu_check.h): CL_TESTS on the CL device, each new schedule also made for
# the NVIDIA and AMD targets and every kernel of it compiled for sm_80 and sm_90 (NVRTC; cubins read by
# cuobjdump) and for gfx942 and gfx1100 (clang-19; code objects read by llvm-readelf-19): a kernel that does
# not compile, spills, uses stack or scratch, or more than 48 KiB of shared memory fails its test. NVRTC and
# cuobjdump come from the .venv's wheels (nvidia-cuda-nvrtc, triton). A kernel checked once is not compiled
# again (markers under $TINY_CACHE_DIR/gpu_check). The counts per architecture are printed at the end.
GPU_CHECK_SITE = $(CURDIR)/$(firstword $(wildcard .venv/lib/python3*/site-packages))
GPU_CHECK_NVRTC = $(firstword $(wildcard $(GPU_CHECK_SITE)/nvidia/cu*/lib/libnvrtc.so.1[0-9]))
GPU_CHECK_CUOBJDUMP = $(firstword $(wildcard $(GPU_CHECK_SITE)/triton/backends/nvidia/bin/cuobjdump))
GPU_CHECK_ENV = TINY_DEVICE=CL TINY_GPU_COMPILE_CHECK=1 $(if $(GPU_CHECK_NVRTC),TINY_NVRTC=$(GPU_CHECK_NVRTC)) \
  $(if $(GPU_CHECK_CUOBJDUMP),TINY_CUOBJDUMP=$(GPU_CHECK_CUOBJDUMP))
# `make test` runs GPU_CHECK_TESTS (a part of CL_TESTS: reductions, matmuls, the demo's training step) under
# the check, the rest of CL_TESTS without it; test-gpu-compile checks all of CL_TESTS.
GPU_CHECK_TESTS := torch_tests/test_reduce.py torch_tests/test_matmul.py \
                   torch_tests/test_training.py::test_demo_model_training_step_runs_without_fallbacks
test-gpu-compile: build
	$(GPU_CHECK_ENV) $(PY) -m pytest -q -p no:cacheprovider $(CL_TESTS)

# The CL device's tests under Oclgrind, an OpenCL interpreter that reports data races and out-of-bounds
# accesses (about 5 minutes; it fails on a report, a failed test or a run that dies). Its
# uninitialized-value plugin stops at LLVM's `freeze` instruction, which the div/mod of a merged grid
# axis compiles to: not used.
OCLGRIND_DIR := build/oclgrind
test-oclgrind: core
	@command -v oclgrind >/dev/null || $(SUDO) apt-get install -y oclgrind
	@mkdir -p $(OCLGRIND_DIR) && echo /usr/lib/oclgrind/liboclgrind-rt-icd.so > $(OCLGRIND_DIR)/oclgrind.icd
	OCL_ICD_VENDORS=$(CURDIR)/$(OCLGRIND_DIR) OCLGRIND_DATA_RACES=1 OCLGRIND_CHECK_API=1 \
	  TINY_CACHE_DIR=$(CURDIR)/$(OCLGRIND_DIR)/cache build/cmake/tiny_tests --gtest_filter='ClDevice.*' \
	  > $(OCLGRIND_DIR)/log 2>&1 || true
	@grep -E '^\[  (PASSED|FAILED) ' $(OCLGRIND_DIR)/log
	@! grep -iE 'data race|invalid (read|write)|fatal|^\[  FAILED ' $(OCLGRIND_DIR)/log

# The differential fuzzer (issue #14): 10,000 seeded random programs on tiny against the CPU, each failure
# shrunk to a printed reproducer (torch_tests/fuzz/run.py; `make test` runs a few hundred through pytest).
FUZZ_SEED ?= 0
.PHONY: fuzz
fuzz: build
	$(PY) torch_tests/fuzz/run.py --programs 10000 --seed $(FUZZ_SEED) --jobs 2

# 2,000 seeded random products, convolutions, poolings, reductions, attention, normalizations, layout copies and
# activations at sizes across the lowering's thresholds, against the CPU and a float64 reference
# (torch_tests/fuzz/shapes.py; `make test` runs 60 of them).
.PHONY: fuzz-shapes
fuzz-shapes: build
	$(PY) torch_tests/fuzz/shapes.py --cases 2000 --seed $(FUZZ_SEED)

# torch.testing._internal (the upstream OpInfo suite) imports expecttest.
$(STAMPS)/upstream: $(STAMPS)/venv
	@$(PY) -c 'import expecttest' >/dev/null 2>&1 || $(PIP) install expecttest
	@touch $@

build: setup core extension

setup: $(STAMPS)/apt $(STAMPS)/venv $(STAMPS)/editable

# Debian packages, installed only when absent; python3-venv and python3-dev only when this python3
# cannot make a venv or lacks its headers.
$(STAMPS)/apt:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	python3 -c 'import ensurepip' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
	  >/dev/null 2>&1 || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	fi
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv: $(STAMPS)/apt
	@[ -x $(PY) ] || python3 -m venv .venv
	@TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -c 'import torch, torchvision, pytest, numpy, ninja; \
	  assert torch.__version__.split("+")[0] == "2.14.1" and torchvision.__version__.split("+")[0] == "0.29.1"' \
	  >/dev/null 2>&1 && [ -x .venv/bin/ruff ] || $(PIP) install $(PIP_PACKAGES)
	@touch $@

# Development mode, for the torch.backends entry point (autoload at `import torch`). The extension itself
# is built in place by `extension`, incrementally.
$(STAMPS)/editable: setup.py pyproject.toml $(STAMPS)/venv
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 TINY_SKIP_EXTENSION=1 $(PIP) install -q --no-build-isolation --no-deps -e .
	@touch $@

build/cmake/build.ninja: | $(STAMPS)/apt
	cmake -S . -B build/cmake -G Ninja

core: $(STAMPS)/apt build/cmake/build.ninja
	$(CCACHE_ENV) cmake --build build/cmake -j $(JOBS)

# Builds go through ccache (the core: CMake's compiler launcher; the extension: Debian's ccache links), with
# paths taken relative to the checkout, so that a clean checkout elsewhere rebuilds from the cache.
CCACHE_ENV := CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1
EXT_CXX = $(or $(wildcard /usr/lib/ccache/g++),$(CXX))
extension: core $(STAMPS)/editable
	$(CCACHE_ENV) CXX=$(EXT_CXX) MAX_JOBS=$(JOBS) $(PY) setup.py -q build_ext --inplace

# ASan + UBSan. The core and its GoogleTest suite build in build/asan (sanitize-core, part of `make test`);
# `sanitize` then builds the torch extension with the same flags into build/asan/pkg (TINY_SANITIZE=1:
# never torch_tiny/_C*.so) and runs SANITIZE_TESTS against that copy of the package, with the compiler's
# libasan preloaded (python is not instrumented) and leak checks off (CPython leaks by design); libstdc++
# is preloaded too, or ASan finds no __cxa_throw to wrap and aborts at the first C++ exception.
# pytest captures sys.stdout/err only (--capture=sys): a report written to fd 2 just before the abort
# must not vanish with pytest's captured output.
# Any report fails the run: ASan halts at the first error, UBSan too (-fno-sanitize-recover=undefined).
# Generated kernels are compiled at run time without sanitizers.
# About 1.5 minutes with the kernel cache warm (after `make test`), 12 with it cold on 2 busy cores.
SANITIZE_TESTS := torch_tests/test_views.py torch_tests/test_inplace.py torch_tests/test_movement.py \
                  torch_tests/test_index.py torch_tests/test_elementwise.py torch_tests/test_reduce.py \
                  torch_tests/test_threads.py
# tests/lsan.supp: leaks of other libraries (PoCL) that LeakSanitizer would report as the test's.
LSAN_BASE := suppressions=$(CURDIR)/tests/lsan.supp
UBSAN_ENV := UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SANITIZE_ENV := $(UBSAN_ENV) LSAN_OPTIONS=$(LSAN_BASE)
# The CL device's tests (PoCL) run without scanning thread-local storage: on a Sapphire Rapids machine (Debian 12,
# PoCL 3.1) LeakSanitizer's tracer crashed reading a dynamic TLS block of PoCL's threads (DTLS at 0x7f8) in every
# ClDevice test. Memory held only in TLS would then be reported as leaked, not hidden (in those tests none is; in
# others glibc's and the HIP runtime's own TLS allocations are, so they keep the default).
SANITIZE_CL_ENV := $(UBSAN_ENV) LSAN_OPTIONS=$(LSAN_BASE):use_tls=0
# $(call asan_ctest,ENV,SELECTION): the sanitized CTest run of those tests, the failed ones run again once alone
asan_ctest = $(1) ASAN_OPTIONS=$(ASAN_CORE) ctest --test-dir build/asan --output-on-failure -j $(JOBS) $(2) || \
  $(1) ASAN_OPTIONS=$(ASAN_CORE) ctest --test-dir build/asan --output-on-failure --rerun-failed
ASAN_CORE := halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:allocator_may_return_null=1
ASAN_TORCH := halt_on_error=1:detect_leaks=0

build/asan/build.ninja: | $(STAMPS)/apt
	cmake -S . -B build/asan -G Ninja -DTINY_SANITIZE=ON

# A failed test runs once more, alone: LeakSanitizer's stop-the-world tracer can crash at exit ("Tracer caught
# signal 11") while PoCL's worker threads wind down on a loaded machine, after the test itself passed; a real
# leak or sanitizer error fails again.
sanitize-core: $(STAMPS)/apt build/asan/build.ninja
	$(CCACHE_ENV) cmake --build build/asan -j $(JOBS)
	$(call asan_ctest,$(SANITIZE_ENV),-E '^ClDevice\.')
	$(call asan_ctest,$(SANITIZE_CL_ENV),-R '^ClDevice\.')

sanitize: sanitize-core $(STAMPS)/editable
	CXX=$(CXX) TINY_SANITIZE=1 MAX_JOBS=$(JOBS) $(PY) setup.py -q build_ext
	cp torch_tiny/*.py build/asan/pkg/torch_tiny/
	cd build/asan/pkg && export $(SANITIZE_ENV) ASAN_OPTIONS=$(ASAN_TORCH) \
	  LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libstdc++.so)" PYTHONPATH=$$PWD && \
	  $(CURDIR)/$(PY) -c 'import torch, torch_tiny; f = torch_tiny._C.__file__; \
	    assert f.startswith("$(CURDIR)/build/asan/pkg/"), f"not the sanitized build: {f}"' && \
	  $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider --capture=sys $(addprefix $(CURDIR)/,$(SANITIZE_TESTS))

format: $(STAMPS)/venv
	@command -v clang-format >/dev/null || $(SUDO) apt-get install -y clang-format
	clang-format -i $(CXX_SOURCES)
	.venv/bin/ruff check --fix --quiet .
	.venv/bin/ruff format --quiet .

lint: $(STAMPS)/venv
	@command -v clang-format >/dev/null || $(SUDO) apt-get install -y clang-format
	clang-format --dry-run -Werror $(CXX_SOURCES)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

clean:
	rm -rf build torch_tiny/*.so
