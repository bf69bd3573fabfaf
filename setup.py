"""Builds torch_tiny._C (csrc/ + aten_ops/) against the installed torch, linking the core library.

The core (compiler/ + runtime/) is built by CMake first:
    cmake -S . -B build/cmake -G Ninja && cmake --build build/cmake
`make build` does both: it installs the package once in development mode with TINY_SKIP_EXTENSION=1
(metadata and the torch.backends entry point only: pip would build in a throwaway directory), then builds
the extension with `setup.py build_ext --inplace`, which keeps its ninja build in build/ so that a
rebuild after touching one file compiles only that file. torch's build uses ccache when it is installed.

TINY_SANITIZE=1 (`make sanitize`) builds the extension with ASan and UBSan against the sanitized core in
build/asan, into build/asan/pkg/torch_tiny (never the package's own _C, which the normal build owns).
"""

import glob
import os

# Building must not load the installed torch_tiny (torch autoloads it, and it may not be built yet).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
SANITIZE = os.environ.get("TINY_SANITIZE") == "1"
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
ASAN_DIR = os.path.join(ROOT, "build", "asan")
CORE_LIB = os.path.join(ASAN_DIR if SANITIZE else os.path.join(ROOT, "build", "cmake"), "libtiny_core.a")


def rel(pattern: str) -> list[str]:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


sources = rel("csrc/*.cpp") + rel("aten_ops/*.cpp")
# setuptools skips the build when no source is newer than the extension: headers and the core library
# count too.
depends = rel("csrc/*.h") + rel("aten_ops/*.h") + rel("compiler/*.h") + rel("runtime/*.h") + [CORE_LIB]

extension = CppExtension(
    name="torch_tiny._C",
    sources=sources,
    depends=depends,
    include_dirs=[ROOT],
    # torch's headers as system headers (gcc then ignores their -I), so -Wextra reports our code only.
    extra_compile_args={
        "cxx": ["-std=c++20", "-O1" if SANITIZE else "-O2", "-Wall", "-Wextra"]
        + (SANITIZE_FLAGS if SANITIZE else [])
        # (as separate arguments: ccache makes a path relative to CCACHE_BASEDIR only then, so that another
        # checkout's build finds the objects of this one in the cache)
        + [arg for p in include_paths() for arg in ("-isystem", p)]
    },
    # whole-archive: the core may register things through static initializers.
    extra_link_args=["-Wl,--whole-archive", CORE_LIB, "-Wl,--no-whole-archive", "-ldl", "-lpthread"]
    + (SANITIZE_FLAGS if SANITIZE else []),
)

BuildExt = BuildExtension.with_options(use_ninja=True)


class SanitizedBuildExt(BuildExt):
    """The sanitized build's objects and extension stay under build/asan, even with --inplace."""

    def finalize_options(self):
        super().finalize_options()
        self.inplace = 0
        self.build_temp = os.path.join(ASAN_DIR, "temp")
        self.build_lib = os.path.join(ASAN_DIR, "pkg")


setup(
    name="torch_tiny",
    version="0.1.0",
    description="tiny: a lazy PyTorch device backend with an embedded compiler",
    packages=["torch_tiny"],
    ext_modules=[] if os.environ.get("TINY_SKIP_EXTENSION") == "1" else [extension],
    cmdclass={"build_ext": SanitizedBuildExt if SANITIZE else BuildExt},
    entry_points={
        "torch.backends": ["torch_tiny = torch_tiny:_autoload"],
        "torch_dynamo_backends": ["tiny = torch_tiny.compile:tiny"],
    },
    python_requires=">=3.10",
    zip_safe=False,
)
