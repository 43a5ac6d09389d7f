#!/usr/bin/env bash
# Fuzzes ckptfs with libFuzzer (clang, ASan+UBSan), in build-fuzz/ (-DCKPTFS_FUZZ=ON).
#
#   scripts/fuzz.sh TARGET SECONDS [LIBFUZZER_ARGS...]  fuzz TARGET (zip, pickle, checkpoint,
#                                                        safetensors, dcp, zero, gguf)
#   scripts/fuzz.sh seed                                 (re)build the seeds: build-fuzz/seeds/
#   scripts/fuzz.sh merge TARGET                         minimize the work corpus into the
#                                                        committed tests/fuzz/corpus/TARGET/
#
# TARGET runs at nice 19 on one core, from build-fuzz/corpus/TARGET/ (seeded on first use with
# the committed corpus, the fixtures, tests/data/sample.pth, the small files of $CKPTFS_CORPUS
# (default ../shared/corpus) and the C++-built hostile cases of tests/fuzz/seeds.cpp), with
# tests/fuzz/TARGET.dict. A crash, leak, timeout (> 10 s) or out-of-memory (> 2 GB) input lands
# in build-fuzz/artifacts/TARGET/: copy it to tests/fuzz/crashes/TARGET/ (it then runs under
# ctest as fuzz_replay_TARGET) and fix the bug. The log is build-fuzz/logs/TARGET.log; its last
# lines give executions, exec/s and coverage (cov: edges, ft: features).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$root/build-fuzz
targets=(zip pickle checkpoint safetensors dcp zero gguf)

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 1; }

configure() {
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCKPTFS_FUZZ=ON >/dev/null
  fi
  nice -n 19 cmake --build "$build" -j"$(nproc)" \
    --target fuzz_zip fuzz_pickle fuzz_checkpoint fuzz_safetensors fuzz_dcp fuzz_zero fuzz_gguf \
    fuzz_seeds >/dev/null
}

# Seeds: real checkpoints (zip and checkpoint targets), their pickles (pickle target), and the
# hostile cases built in C++.
seed() {
  rm -rf "$build/seeds"
  "$build/tests/fuzz/fuzz_seeds" "$build/seeds"
  mkdir -p "$build/seeds/safetensors"
  if [ ! -f "$build/fixtures/convnet.pth" ]; then
    /usr/bin/python3 scripts/make_fixtures.py "$build/fixtures" >/dev/null
  fi
  local corpus=${CKPTFS_CORPUS:-$root/../shared/corpus}
  /usr/bin/python3 - "$build/seeds" "$build/fixtures" tests/data "$corpus" <<'PY'
import io, pickletools, sys, zipfile
from pathlib import Path

out = Path(sys.argv[1])
limit = 64 << 10  # libFuzzer's -max_len below: larger files would only be cut

def pickles(data):
    """The pickles of a checkpoint: data.pkl of a zip, each pickle of a legacy stream."""
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return [zf.read(n) for n in zf.namelist() if n.endswith(".pkl")]
    found, at = [], 0
    while at < len(data) and len(found) < 5:
        try:
            end = max(pos for _, _, pos in pickletools.genops(data[at:])) + 1 + at
        except Exception:
            break
        found.append(data[at:end])
        at = end
    return found

# safetensors files and indexes (the fixtures' and those of ../shared/corpus/formats).
for directory in sys.argv[2:]:
    for path in sorted(Path(directory).glob("**/*")):
        if path.is_file() and path.suffix in (".safetensors", ".json") \
                and not path.name.endswith(".expected.json") and path.stat().st_size <= limit:
            name = f"{path.parent.name}.{path.name}"
            (out / "safetensors" / name).write_bytes(path.read_bytes())

for directory in sys.argv[2:]:
    for path in sorted(Path(directory).glob("*")):
        if path.suffix == ".json" or path.suffix == ".tsv" or not path.is_file():
            continue
        data = path.read_bytes()
        for i, p in enumerate(pickles(data)):
            if len(p) <= limit:
                (out / "pickle" / f"{path.stem}.{i}").write_bytes(p)
        if len(data) <= limit:
            (out / "checkpoint" / path.name).write_bytes(data)
            if data[:4] == b"PK\x03\x04":
                (out / "zip" / path.name).write_bytes(data)
PY
  for t in "${targets[@]}"; do
    echo "seeds/$t: $(find "$build/seeds/$t" -type f | wc -l) files"
  done
}

is_target() { [[ " ${targets[*]} " == *" $1 "* ]]; }

case "${1:-}" in
  seed)
    configure
    seed
    ;;
  merge)
    target=${2:-}
    is_target "$target" || usage
    configure
    committed=tests/fuzz/corpus/$target
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # -merge=1 keeps the smallest inputs that together reach every edge of all of them (edges
    # only: -use_counters=0), each cut to a few KiB, so that the committed corpus stays a few
    # hundred KiB (all three: 415 KiB, 97-99% of the edges of the whole work corpus).
    max_len=8192
    [ "$target" = checkpoint ] && max_len=4096
    [ "$target" = zero ] && max_len=131072  # a directory of files: cut, it is no checkpoint
    nice -n 19 "$build/tests/fuzz/fuzz_$target" -merge=1 -use_counters=0 -max_len=$max_len \
      -rss_limit_mb=2048 -timeout=30 "$tmp" "$committed" "$build/corpus/$target" 2>&1 | tail -1
    find "$committed" -type f ! -name .gitkeep -delete
    cp "$tmp"/* "$committed"/
    find "$committed" -type f ! -name .gitkeep -printf '%s\n' |
      awk -v d="$committed" '{n++; s+=$1} END {printf "%s: %d files, %d KiB\n", d, n, s / 1024}'
    ;;
  *)
    target=${1:-}
    seconds=${2:-}
    is_target "$target" && [[ "$seconds" =~ ^[0-9]+$ ]] || usage
    shift 2
    configure
    [ -d "$build/seeds" ] || seed
    work=$build/corpus/$target
    if [ ! -d "$work" ]; then
      mkdir -p "$work"
      cp tests/fuzz/corpus/"$target"/* "$build/seeds/$target"/* "$work"/ 2>/dev/null || true
    fi
    mkdir -p "$build/artifacts/$target" "$build/logs"
    # A ZeRO input is a directory of several torch.save files: its seeds are 30-120 KiB.
    max_len=65536
    [ "$target" = zero ] && max_len=131072
    echo "fuzzing $target for $seconds s: log in $build/logs/$target.log"
    # ASan/UBSan options: abort on the first error with a stack, keep leak checking on.
    ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      nice -n 19 "$build/tests/fuzz/fuzz_$target" "$work" \
        -dict=tests/fuzz/"$target".dict -max_len=$max_len -rss_limit_mb=2048 -timeout=10 \
        -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$target/" "$@" >"$build/logs/$target.log" 2>&1 || {
      echo "fuzz_$target stopped on a failure: see $build/logs/$target.log and" \
        "$build/artifacts/$target/" >&2
      exit 1
    }
    grep -E "^#[0-9]+.*(DONE|pulse)" "$build/logs/$target.log" | tail -1
    grep -E "stat::number_of_executed_units|stat::average_exec_per_sec" \
      "$build/logs/$target.log" || true
    ;;
esac
