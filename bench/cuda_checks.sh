#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one script for a machine lent for a few minutes:
#   bash bench/cuda_checks.sh OUT_DIR
# The most important first, each with its own time limit and its log in OUT_DIR, so one that fails or runs long
# leaves the others:
# 1. tests/test_cuda.py (skipped where there is no GPU: CI has none) and the 16-bit decoding tests;
# 2. bench/train_gpu.py: seqmap's Transformer-base training step against MarianMTModel's, bf16 and fp32
#    (tokens/s, MFU, memory; JSON in OUT_DIR);
# 3. torchrun --nproc_per_node 1: a short run of the main job's config in a process group of one, whose
#    train.log must say "backend nccl" (the path several GPUs take, on one);
# 4. the README's main job trained on the GPU (train.device=cuda, bf16 autocast), then its test split decoded
#    on the GPU in bf16 with cuDNN's attention left out (seqmap's default) and kept (SEQMAP_CUDNN_ATTENTION=1),
#    then in float32 and fp16 (BLEU and seconds of each), and one sentence translated;
# 5. bench/decode_gpu.py in the 16-bit precisions (seqmap vs transformers decoding).
# The limits add up to 14 minutes; CHECKS_BUDGET (seconds, default 570, for a command limited to 10 minutes)
# caps the whole script: a step gets at most what is left of it, and is skipped with under 20 s left. The runs are
# written under CHECKS_TMP (default /tmp).
# Packages a GPU machine without network access may lack (OpenCC, sacremoses) travel as wheels in .whl/, fetched
# beforehand where pip works, for that machine's Python (3.12 on the device tool's machines):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl \
#     opencc==1.4.2 sacremoses==0.2.0
set -u
out=${1:?give an output folder}
mkdir -p "$out"
budget=${CHECKS_BUDGET:-570}
tmp=${CHECKS_TMP:-/tmp}
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
step() {  # step NAME SECONDS COMMAND...: run with a limit (at most what is left of the budget), log to OUT_DIR/NAME.log
  local name=$1 limit=$2 start=$SECONDS left=$((budget - SECONDS)) rc
  shift 2
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, $left s left of CHECKS_BUDGET=$budget" | tee -a "$out/steps.txt"
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s (limit $limit s)" | tee -a "$out/steps.txt"
  tail -n 25 "$out/$name.log"
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)"
step tests 100 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/decoding/test_precision.py
step train_gpu 150 python3 bench/train_gpu.py --precision bf16,fp32 --json "$out/train_gpu.json"
ddp=$tmp/ddp  # a short run: 100 steps (warm-up 10 to fit), greedy test decoding
rm -rf "$ddp"
step torchrun 120 python3 -m torch.distributed.run --standalone --nproc_per_node 1 -m seqmap train \
  configs/tatoeba_en_zh.yaml --run-dir "$ddp" --train.device cuda --train.max_steps 100 --train.warmup 10 \
  --decode.beam_size 1
cp "$ddp/train.log" "$out/torchrun_train.log" 2>/dev/null
if grep -q "backend nccl" "$ddp/train.log" 2>/dev/null; then
  echo "== torchrun: NCCL: $(grep -m1 'backend nccl' "$ddp/train.log")" | tee -a "$out/steps.txt"
else
  echo "== torchrun: FAILED: no 'backend nccl' in $ddp/train.log" | tee -a "$out/steps.txt"
fi
run=$tmp/en-zh
rm -rf "$run"
step main_job 200 python3 -m seqmap train configs/tatoeba_en_zh.yaml --run-dir $run --train.device cuda
# its own test split, as training scored it; bf16 with cuDNN's attention out (seqmap's default) and in
# (torch's order: it builds a plan per new shape; seqmap.nn.attention)
step evaluate_bf16 45 python3 -m seqmap evaluate $run --device cuda --precision bf16 --out "$out/test_bf16.hyp"
SEQMAP_CUDNN_ATTENTION=1 step evaluate_bf16_cudnn 60 python3 -m seqmap evaluate $run --device cuda --precision bf16 \
  --out "$out/test_bf16_cudnn.hyp"
step evaluate_fp32 30 python3 -m seqmap evaluate $run --device cuda --precision fp32 --out "$out/test_fp32.hyp"
step evaluate_fp16 45 python3 -m seqmap evaluate $run --device cuda --precision fp16 --out "$out/test_fp16.hyp"
step translate 20 python3 -m seqmap translate $run "I love machine learning." --device cuda --precision bf16
step decode_gpu 70 python3 bench/decode_gpu.py --precisions bf16 fp16 --json "$out/decode_gpu.json"
