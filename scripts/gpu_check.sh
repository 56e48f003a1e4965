#!/usr/bin/env bash
# The GPU check of issues 5 and 26, ready for a lent accelerator (the device tool), in about 5 minutes on an
# H100/H200: calibrate the GPU at a 7B-class model's shapes, run bench-local in bf16 over batch 1…256 in
# graph mode (a CUDA graph per batch, the default on CUDA), then eager and compiled at three batches for
# the comparison, compare with first principles on the calibrated TOML and on the datasheet preset, and
# fit `predict` on the first half. Everything lands in $OUT (CSV, TOML, JSON and the printed tables).
#
#   OUT=gpu-out scripts/gpu_check.sh                       # on a GPU machine, from the repo root
#   DEVICE=cpu MODEL=smollm2-135m BATCHES=1,8 CONTEXT=64 scripts/gpu_check.sh   # a dry run anywhere
#
# Needs python3 with torch, numpy, scipy, typer and rich (the device image has them); no install step.
set -euo pipefail
OUT=${OUT:-gpu-check-out}
DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-llama-3.1-8b}
DATASHEET=${DATASHEET:-h200}
BATCHES=${BATCHES:-1,2,4,8,16,32,64,128,256}
CONTEXT=${CONTEXT:-512}
FEW=${FEW:-1,32,256}  # the batches eager and compiled run at
if [ "$DEVICE" = cpu ]; then MODE=${MODE:-eager}; else MODE=${MODE:-graph}; fi  # no CUDA graphs on a CPU
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
tr() { "$PY" -m tokenroof "$@"; }

{
  echo "== machine"; "$PY" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__,
    torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA")'
  echo "== calibrate ($DEVICE, $MODEL shapes)"
  tr calibrate --device "$DEVICE" --dtype bf16,fp16,fp32 --model "$MODEL" --out "$OUT/calibrated.toml" --json \
    > "$OUT/calibrate.json"
  cat "$OUT/calibrated.toml"
  echo "== bench-local bf16, $MODE mode, context $CONTEXT, against the calibrated TOML"
  tr bench-local --device "$DEVICE" -m "$MODEL" --dtype bf16 --batch "$BATCHES" --context "$CONTEXT" \
    --warmup 5 --steps 20 --mode "$MODE" --hardware "$OUT/calibrated.toml" --out "$OUT/bench-local-bf16.csv" \
    --json > "$OUT/bench-local-bf16.json"
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("batch  ms  of-calibrated-bandwidth  byte-floor-ratio");
[print(p["batch"], round(p["tpot_ms"], 3), p["bandwidth_fraction"], p["bandwidth_fraction"] and round(1 / p["bandwidth_fraction"], 2))
 for p in d["points"]]' "$OUT/bench-local-bf16.json"
  for other in eager compile; do
    [ "$other" = "$MODE" ] && continue
    echo "== bench-local bf16, $other mode, batches $FEW (the comparison)"
    tr bench-local --device "$DEVICE" -m "$MODEL" --dtype bf16 --batch "$FEW" --context "$CONTEXT" \
      --warmup 5 --steps 20 --mode "$other" --hardware "$OUT/calibrated.toml" --out "$OUT/bench-local-$other.csv" \
      || echo "($other mode failed: see above)"
  done
  echo "== the same CSV against the datasheet preset ($DATASHEET, default efficiencies)"
  tr roofline -m "$MODEL" -H "$DATASHEET" --batch "$BATCHES" --context "$CONTEXT"
  echo "== predict fitted on the first half of the curve"
  rows=$(grep -vc '^#' "$OUT/bench-local-bf16.csv"); keep=$(( (rows - 1) / 2 > 3 ? (rows - 1) / 2 : 3 ))
  awk -v k="$keep" '/^#/ {print; next} {if (n++ <= k) print}' "$OUT/bench-local-bf16.csv" > "$OUT/first-half.csv"
  tr predict "$OUT/first-half.csv" --batch "$BATCHES"
  tr predict "$OUT/first-half.csv" --batch "$BATCHES" -m "$MODEL" -H "$OUT/calibrated.toml" --context "$CONTEXT" \
    --decode-only
} 2>&1 | tee "$OUT/gpu_check.txt"
