#!/usr/bin/env bash
# Issue 26's GPU check, one script inside 8 minutes (its steps' time limits sum to 480 s), for the device machine:
#   bash benchmarks/gpu_population.sh            (writes $OUT/gpu-population.md, or ./gpu-population.md)
# Where the machine lacks pydantic, mnist1d or a recent typer, carry their wheels in .whl/ (a folder git ignores:
# echo /.whl/ >> .git/info/exclude), downloaded beforehand with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform any -d .whl pydantic==2.14.4 pydantic-core==2.50.5 \
#     annotated-types typing-inspection typing-extensions mnist1d typer==0.29.2
# and the script installs them into /tmp/site first.
# DEVICE=cpu SEEDS=4 GRADMA=2 SCALE=tiny PYTHON=.venv/bin/python OUT=/tmp bash benchmarks/gpu_population.sh  checks the
# script's steps on a CPU (small numbers).
set -u
out="${OUT:-.}/gpu-population.md"
device="${DEVICE:-cuda}"; seeds="${SEEDS:-100}"; gradma="${GRADMA:-32}"; py="${PYTHON:-python3}"; scale="${SCALE:-paper}"
. benchmarks/gpu_steps.sh  # the wheels, and step()
{ echo "# Population executor on $device, $(date -u +%F)"; echo; nvidia-smi --query-gpu=name,memory.total --format=csv;
  "$py" -c "import torch; print('torch', torch.__version__)"; } > "$out" 2>&1
step 90 "every CUDA test (executors, populations, CUDA graphs, device plans, reads between rounds, GradMA's QP_l, LwF's, iCaRL's and TARGET's losses; 21 took 59 s on an H200, about 45 now: verbose, so a step cut at its limit still lists each test it finished)" \
  "$py" -m pytest -v -m gpu tests/engine/test_gpu.py tests/engine/test_population.py tests/engine/test_pending.py \
  tests/engine/test_device_plan.py tests/algorithms/test_projection.py tests/continual/test_own_losses.py
step 20 "GradMA's worker QP_l (C = 3, tinynn's 10 tensors) for 10, 100 and 1000 rows: read to the host vs on the device" \
  "$py" -m benchmarks.qp_paths --device "$device" --rows 10,100,1000 --repeat 2
step 90 "$seeds seeds of the tiny GradMA MNIST column (FedAvg, MLP, S = 10) as one population, eager and graphed, vs 3 alone" \
  "$py" -m benchmarks.population_bench fedavg "$seeds" --device "$device" --alone 3 \
  --modes batched,population,population-graphed \
  --set local.precision=fp32
step 55 "the same $seeds seeds with their round plans drawn on the device (local.shuffle: device), vs 3 alone" \
  "$py" -m benchmarks.population_bench fedavg "$seeds" --device "$device" --alone 3 \
  --modes batched,population,population-graphed --set local.precision=fp32 --set local.shuffle=device
step 60 "$gradma GradMA tuning trials of one seed (η_l from ½× to 2× the entry's) as one population vs 2 alone" \
  "$py" -m benchmarks.population_bench gradma "$gradma" --trials --device "$device" --alone 2 \
  --modes batched,population --set local.precision=fp32
step 40 "the peer scenario's round (MLP 784-200-200-10, S = 10), batched: eager and graphed (CUDA graphs)" \
  "$py" -m benchmarks.bench_clients --device "$device" --cases mlp --clients 10 --executors batched,graphed --rounds 3 \
  --min-seconds 3
step 35 "--compile auto's step prices (eager, graphed, compiled from an empty cache) of the peer MLP, S = 10" \
  "$py" -m benchmarks.step_prices --device "$device" --cases mlp --clients 10
step 30 "one round under torch.profiler: a population of $gradma runs, its step eager, then replayed from CUDA graphs" \
  "$py" benchmarks/profile_round.py --device "$device" --runs "$gradma" --set local.precision=fp32 --top 12 \
  --compile off,graphs
step 60 "GradMA Table 1 at paper scale priced on this GPU: populations probed on generated data of each dataset's shape and size" \
  bash -c "set -o pipefail; '$py' -m fedbench reproduce gradma table1 --scale '$scale' --dry-run --estimate \
  --stand-in-data --device '$device' --probe-budget 40 2>&1 | sed -n '/estimate on\|^probe:\|rror/,\$p'"
cat "$out"
