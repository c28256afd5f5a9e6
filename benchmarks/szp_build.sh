#!/usr/bin/env bash
# Builds the public SZp compressor (github.com/szcompressor/SZp) as a shared library, Release
# (-O3), with SZp's own CMake build, for the benchmark driver benchmarks/szp_driver.py.
#
# Usage: benchmarks/szp_build.sh SZP_SOURCE_DIR BUILD_DIR
#   SZP_SOURCE_DIR  an extracted SZp tree (the one holding CMakeLists.txt and SZp/include/szp.h)
#   BUILD_DIR       where CMake builds; libSZp.so ends up directly in it
#
# Idempotent: re-running reconfigures and rebuilds only what changed. Nothing of SZp is copied
# into this project; this script only drives SZp's build system.
#
# Environment (all optional):
#   SZP_EXTRA_FLAGS  extra compiler flags appended to the Release flags, e.g. "-march=native"
#                    (zccl_torch's extension is built with -march=native by default; SZp's
#                    CMake Release build uses plain "-O3 -DNDEBUG")
#   JOBS             parallel build jobs (default: nproc)
#
# SZp's CMakeLists.txt links the target PkgConfig::ZSTD, which only exists when pkg-config finds
# libzstd, although no SZp source uses zstd. When libzstd's pkg-config file is absent we inject
# (CMAKE_PROJECT_szp_INCLUDE, a hook CMake runs right after SZp's project() call) an empty
# INTERFACE IMPORTED target of that name, so that SZp's own CMakeLists.txt builds unchanged.
#
# Run time: the driver calls SZp's serial entry points (szp_*_single_thread_arg), which do not
# use OpenMP; the library still links libgomp because SZp's CMake requires OpenMP, so run
# benchmarks with OMP_NUM_THREADS=1 anyway.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 SZP_SOURCE_DIR BUILD_DIR" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
mkdir -p "$2"
build=$(cd "$2" && pwd)

if [[ ! -f "$src/CMakeLists.txt" || ! -f "$src/SZp/include/szp.h" ]]; then
    echo "error: $src does not look like an SZp source tree (CMakeLists.txt, SZp/include/szp.h)" >&2
    exit 1
fi

cmake_args=(
    -S "$src" -B "$build"
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=ON
    -DBUILD_TESTING=OFF
    "-DCMAKE_C_FLAGS_RELEASE=-O3 -DNDEBUG ${SZP_EXTRA_FLAGS:-}"
    "-DCMAKE_CXX_FLAGS_RELEASE=-O3 -DNDEBUG ${SZP_EXTRA_FLAGS:-}"
)

if ! pkg-config --exists libzstd 2>/dev/null; then
    stub="$build/zccl_zstd_stub.cmake"
    cat >"$stub.tmp" <<'EOF'
# Written by zccl_torch benchmarks/szp_build.sh: SZp links PkgConfig::ZSTD but uses no zstd code.
if(NOT TARGET PkgConfig::ZSTD)
  add_library(PkgConfig::ZSTD INTERFACE IMPORTED)
endif()
EOF
    # Keep the file's timestamp when unchanged so that CMake does not reconfigure needlessly.
    if cmp -s "$stub.tmp" "$stub"; then rm -f "$stub.tmp"; else mv -f "$stub.tmp" "$stub"; fi
    cmake_args+=("-DCMAKE_PROJECT_szp_INCLUDE=$stub")
else
    # libzstd found: drop a stub hook that an earlier run may have left in the CMake cache.
    cmake_args+=("-UCMAKE_PROJECT_szp_INCLUDE")
fi

cmake "${cmake_args[@]}"
cmake --build "$build" --target SZp -j "${JOBS:-$(nproc)}"

lib="$build/libSZp.so"
if [[ ! -f "$lib" ]]; then
    echo "error: the build finished but $lib is missing" >&2
    exit 1
fi
echo "SZp shared library: $lib"
