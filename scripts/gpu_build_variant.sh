#!/usr/bin/env bash
# Builds a GPU codec kernel variant for scripts/gpu_session.sh's variant stages, on a machine with
# nvcc and no GPU: tests/cuda/test_cuszp (the codec program, with its bench) and
# benchmarks/gpu/codec_compare, both with extra compile flags, into one folder.
#
#   scripts/gpu_build_variant.sh .dev/binrNAME -DZCCL_GPU_DECODE_MIN_BLOCKS=3 [...]
#
# The settings a variant can change are the ZCCL_GPU_* macros of csrc/compress/cuszp_kernels.cuh.
# CUDA_ARCH (default 90) as in build_codec_compare.sh; .dev/cuSZp for the cuSZp comparison.
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n 2,9p "$0" >&2; exit 2; }
out=$1
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
arch=${CUDA_ARCH:-90}
nvcc -O3 -std=c++17 -fmad=false -lineinfo "-gencode=arch=compute_$arch,code=sm_$arch" \
  -Werror all-warnings -Xcompiler=-fopenmp,-Wall,-Wextra -Icsrc/compress "$@" \
  tests/cuda/test_cuszp.cu csrc/compress/cuszp.cu csrc/compress/fzlight.cpp csrc/compress/crc32c.cpp \
  -lgomp -o "$out/test_cuszp"
EXTRA_NVCC_FLAGS="$*" BUILD_DIR="/tmp/zccl_variant_$(basename "$out")" WERROR=1 CUDA_ARCH=$arch \
  bash benchmarks/gpu/build_codec_compare.sh "$out/codec_compare"
echo "built $out/test_cuszp and $out/codec_compare ($*)"
