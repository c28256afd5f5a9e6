#!/usr/bin/env bash
# Builds benchmarks/gpu/codec_compare (our GPU codec vs the public cuSZp vs cudaMemcpy D2D).
#
# Usage: benchmarks/gpu/build_codec_compare.sh OUTPUT_PATH
#
#   1. cuSZp, from an extracted tree of github.com/szcompressor/cuSZp (default: .dev/cuSZp in
#      this repository; CUSZP_DIR overrides), compiled with plain nvcc into a static library under
#      BUILD_DIR. Only the two sources behind the API the benchmark calls are built
#      (src/cuSZp_entry_1D_f32.cu, src/cuSZp_kernels_1D_f32.cu: the 1-D float32 plain, outlier
#      and fixed modes), with cuSZp's own Release flags (-O3, -Wno-unused-result) and
#      -gencode for CUDA_ARCH. cuSZp's CMakeLists.txt is not used: it hard-codes
#      CMAKE_CUDA_ARCHITECTURES 60..86, and nvcc 13 no longer targets sm_60/sm_70.
#      Nothing of cuSZp is copied into this project.
#      When the tree is missing, codec_compare is built without cuSZp (no -DWITH_CUSZP) and this
#      script says so; it then measures our codec and the copy only.
#   2. codec_compare from benchmarks/gpu/codec_compare.cu + csrc/compress/{cuszp.cu, fzlight.cpp,
#      crc32c.cpp}, with nvcc -O3 -std=c++17 -fmad=false (our encoder's byte identity with the CPU
#      needs -fmad=false), -Wall -Wextra as errors, OpenMP for fzlight.cpp, no zstd (not needed).
#      libstdc++, libgcc and libgomp are linked statically and cudart statically (nvcc's
#      default), so a binary built on one machine also runs on another with an equal or newer
#      glibc and a CUDA 13 driver.
#
# Environment (all optional):
#   CUSZP_DIR  cuSZp source tree (default: <repo>/.dev/cuSZp)
#   BUILD_DIR  where objects and libcuSZp_1D_f32.a go (default: /tmp/zccl_codec_compare_build)
#   CUDA_ARCH  compute capability digits, e.g. 90 (default) or "90;100"
#   NVCC       the nvcc to use (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   NICE       niceness of the compiles (default 0; e.g. 19 on a shared build machine)
#   JOBS       parallel compiles (default: 2)
#   EXTRA_NVCC_FLAGS  more flags for our sources, e.g. -DZCCL_GPU_ENCODE_BLOCKS_PER_WARP=4 to
#              measure a kernel variant (split on spaces)
#   WERROR     1: nvcc warnings are errors (-Werror all-warnings), as in tests/test_cuda_compile.py
#              (default 0, so that another host compiler's new warning does not stop a GPU run)
set -euo pipefail

die() { echo "build_codec_compare: error: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || { echo "usage: $0 OUTPUT_PATH" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$1
mkdir -p "$(dirname "$out")" || die "cannot create the folder of $out"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

cuszp_dir=${CUSZP_DIR:-$repo/.dev/cuSZp}
build=${BUILD_DIR:-/tmp/zccl_codec_compare_build}
jobs=${JOBS:-2}
nice_level=${NICE:-0}
nvcc=${NVCC:-}
if [[ -z $nvcc ]]; then
    if command -v nvcc >/dev/null 2>&1; then nvcc=nvcc
    elif [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc
    else die "nvcc not found (set NVCC=/path/to/nvcc)"; fi
fi
command -v "$nvcc" >/dev/null 2>&1 || die "NVCC=$nvcc is not an executable"
mkdir -p "$build" || die "cannot create BUILD_DIR $build"

gencode=()
IFS=';, ' read -r -a archs <<<"${CUDA_ARCH:-90}"
for a in "${archs[@]}"; do
    [[ -n $a ]] && gencode+=("-gencode=arch=compute_$a,code=sm_$a")
done
[[ ${#gencode[@]} -gt 0 ]] || die "CUDA_ARCH is empty"

echo "build_codec_compare: $("$nvcc" --version | tail -n 1) (${gencode[*]})"

# Runs the compile commands given on stdin as NUL-separated strings, `jobs` at a time (logs:
# BUILD_DIR/compile.PREFIX.N.log); on failure prints each failing command and its output.
run_parallel() {
    local prefix=$1
    local -a pids=() logs=() cmds=()
    local i=0 status=0
    while IFS= read -r -d '' cmd; do
        local log="$build/compile.$prefix.$i.log"
        ( eval "nice -n $nice_level $cmd" ) >"$log" 2>&1 &
        pids+=($!); logs+=("$log"); cmds+=("$cmd")
        i=$((i + 1))
        if (( ${#pids[@]} >= jobs )); then
            if ! wait "${pids[0]}"; then status=1; echo "FAILED: ${cmds[0]}" >&2; cat "${logs[0]}" >&2; fi
            pids=("${pids[@]:1}"); logs=("${logs[@]:1}"); cmds=("${cmds[@]:1}")
        fi
    done
    for k in "${!pids[@]}"; do
        if ! wait "${pids[$k]}"; then status=1; echo "FAILED: ${cmds[$k]}" >&2; cat "${logs[$k]}" >&2; fi
    done
    return $status
}
q() { printf '%q' "$1"; }

# ---------------------------------------------------------------------------------------------
# 1. cuSZp
with_cuszp=0
cuszp_srcs=(src/cuSZp_entry_1D_f32.cu src/cuSZp_kernels_1D_f32.cu)
if [[ -f $cuszp_dir/include/cuSZp.h && -f $cuszp_dir/${cuszp_srcs[0]} && -f $cuszp_dir/${cuszp_srcs[1]} ]]; then
    echo "build_codec_compare: building cuSZp (${cuszp_srcs[*]}) from $cuszp_dir into $build"
    cmds=()
    objs=()
    for s in "${cuszp_srcs[@]}"; do
        o=$build/cuszp_$(basename "$s" .cu).o
        objs+=("$o")
        cmds+=("$(q "$nvcc") -O3 -DNDEBUG -std=c++17 ${gencode[*]} -Xcompiler -Wno-unused-result \
-I$(q "$cuszp_dir/include") -I$(q "$cuszp_dir/include/cuSZp") -c $(q "$cuszp_dir/$s") -o $(q "$o")")
    done
    printf '%s\0' "${cmds[@]}" | run_parallel cuszp || die "cuSZp did not compile (commands and output above)"
    rm -f "$build/libcuSZp_1D_f32.a"
    ar rcs "$build/libcuSZp_1D_f32.a" "${objs[@]}" || die "ar failed"
    with_cuszp=1
else
    echo "build_codec_compare: WARNING: no cuSZp tree at $cuszp_dir (include/cuSZp.h and" \
         "${cuszp_srcs[*]} expected): building WITHOUT cuSZp; codec_compare will measure our codec" \
         "and cudaMemcpy only. To include it: fetch github.com/szcompressor/cuSZp and extract it there" \
         "(or set CUSZP_DIR)." >&2
fi

# ---------------------------------------------------------------------------------------------
# 2. codec_compare
flags=(-O3 -std=c++17 -fmad=false "${gencode[@]}" -Xcompiler=-fopenmp,-Wall,-Wextra
       "-I$repo/csrc/compress")
[[ ${WERROR:-0} == 1 ]] && flags+=(-Werror all-warnings)
read -r -a extra_flags <<<"${EXTRA_NVCC_FLAGS:-}"
flags+=("${extra_flags[@]}")
cuszp_flags=()
if (( with_cuszp )); then
    # cuSZp's headers are third-party: included as system headers (their warnings are not ours).
    cuszp_flags=(-DWITH_CUSZP -isystem "$cuszp_dir/include" -isystem "$cuszp_dir/include/cuSZp")
fi
ours=("$repo/csrc/compress/cuszp.cu" "$repo/csrc/compress/fzlight.cpp"
      "$repo/csrc/compress/crc32c.cpp" "$repo/benchmarks/gpu/codec_compare.cu")
echo "build_codec_compare: compiling codec_compare ($( ((with_cuszp)) && echo "with cuSZp" || echo "WITHOUT cuSZp"))"
cmds=()
objs=()
for s in "${ours[@]}"; do
    o=$build/zccl_$(basename "$s").o
    objs+=("$o")
    extra=""
    if [[ $(basename "$s") == codec_compare.cu && ${#cuszp_flags[@]} -gt 0 ]]; then
        extra=$(printf '%q ' "${cuszp_flags[@]}")
    fi
    # .cpp files go through nvcc too (-x cu is not needed: nvcc hands .cpp to the host compiler).
    cmds+=("$(q "$nvcc") $(printf '%q ' "${flags[@]}") $extra -c $(q "$s") -o $(q "$o")")
done
printf '%s\0' "${cmds[@]}" | run_parallel zccl || die "codec_compare did not compile (commands and output above)"

libs=()
(( with_cuszp )) && libs+=("$build/libcuSZp_1D_f32.a")
gomp=$(gcc -print-file-name=libgomp.a 2>/dev/null || true)
if [[ -n $gomp && -f $gomp ]]; then
    libs+=("$gomp" -lpthread -ldl)   # static OpenMP runtime: no libgomp.so needed where it runs
else
    libs+=(-lgomp)
fi
tmp="$out.tmp$$"
nice -n "$nice_level" "$nvcc" "${gencode[@]}" "${objs[@]}" "${libs[@]}" \
    -Xcompiler=-static-libstdc++,-static-libgcc -o "$tmp" || { rm -f "$tmp"; die "link failed"; }
mv -f "$tmp" "$out"
echo "build_codec_compare: built $out ($( ((with_cuszp)) && echo "with cuSZp: ours, cuszp_plain, cuszp_outlier, cuszp_fixed" || echo "WITHOUT cuSZp: ours only"))"
