#!/usr/bin/env bash
# Issue 26's second GPU check, under 4 minutes (its steps' time limits sum to 240 s): ResNet-18 against the measured
# matmul peak in the precision used (bf16 autocast, and TF32), and --compile auto's prices of ResNet-18-BN. Run it
# after benchmarks/gpu_population.sh on the same warm machine when 4 minutes of device time are left, or first:
#   bash benchmarks/gpu_resnet.sh            (writes $OUT/gpu-resnet.md, or ./gpu-resnet.md)
# The wheels: as gpu_population.sh's header says (.whl/, installed into /tmp/site first).
# DEVICE=cpu CLIENTS=2 PRICED=mlp-tiny PYTHON=.venv/bin/python OUT=/tmp bash benchmarks/gpu_resnet.sh  checks the
# steps on a CPU (small numbers).
set -u
out="${OUT:-.}/gpu-resnet.md"
device="${DEVICE:-cuda}"; clients="${CLIENTS:-50}"; py="${PYTHON:-python3}"; priced="${PRICED:-resnet18bn}"
. benchmarks/gpu_steps.sh  # the wheels, and step()
{ echo "# ResNet-18 on $device, $(date -u +%F)"; echo; nvidia-smi --query-gpu=name,memory.total --format=csv;
  "$py" -c "import torch; print('torch', torch.__version__)"; } > "$out" 2>&1
step 110 "ResNet-18 (GroupNorm, BatchNorm), S = $clients, bf16 autocast: % of the bf16 matmul peak, eager and graphed" \
  "$py" -m benchmarks.bench_clients --device "$device" --cases resnet18gn,resnet18bn --clients "$clients" \
  --executors batched,graphed --precision bf16 --no-flower --rounds 3 --min-seconds 3
step 50 "the same in float32 with TF32 (the engine's default), eager: % of the TF32 matmul peak" \
  "$py" -m benchmarks.bench_clients --device "$device" --cases resnet18gn,resnet18bn --clients "$clients" \
  --executors batched --no-flower --rounds 3 --min-seconds 3
step 80 "--compile auto's prices of $priced (eager, graphed, compiled from an empty cache), S = 4" \
  "$py" -m benchmarks.step_prices --device "$device" --cases "$priced" --clients 4
cat "$out"
