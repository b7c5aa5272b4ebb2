#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one script for a machine lent for a few minutes:
#   bash bench/cuda_checks.sh OUT_DIR
# 1. tests/test_cuda.py (skipped where there is no GPU: CI has none) and the 16-bit decoding tests;
# 2. bench/decode_gpu.py: seqmap vs transformers decoding on the GPU in fp32, fp16 and bf16 (JSON in OUT_DIR);
# 3. the README's main job trained on the GPU (train.device=cuda, bf16 autocast), then its test split decoded
#    on the GPU in float32 and with --precision bf16 and fp16 (BLEU and seconds of each).
# Each step has its own time limit and its log in OUT_DIR, so one that fails or runs long leaves the others.
# Packages a GPU machine without network access may lack (OpenCC, sacremoses) travel as wheels in .whl/, fetched
# beforehand where pip works, for that machine's Python (3.12 on the device tool's machines):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl \
#     opencc==1.4.2 sacremoses==0.2.0
set -u
out=${1:?give an output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
step() {  # step NAME SECONDS COMMAND...: run with a limit, log to OUT_DIR/NAME.log, say how it ended
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - start)) s"
  tail -n 25 "$out/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)"
step tests 200 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/decoding/test_precision.py
step decode_gpu 240 python3 bench/decode_gpu.py --json "$out/decode_gpu.json"
run=/tmp/en-zh
step main_job 300 python3 -m seqmap train configs/tatoeba_en_zh.yaml --run-dir $run --train.device cuda
for precision in fp32 bf16 fp16; do  # its own test split, as training scored it
  step "evaluate_$precision" 90 python3 -m seqmap evaluate $run --device cuda --precision $precision \
    --out "$out/test_$precision.hyp"
done
# the same in bf16 with cuDNN's attention left in torch's order (it builds a plan per new shape; seqmap.nn.attention)
SEQMAP_CUDNN_ATTENTION=1 step evaluate_bf16_cudnn 120 python3 -m seqmap evaluate $run --device cuda --precision bf16 \
  --out "$out/test_bf16_cudnn.hyp"
step translate 60 python3 -m seqmap translate $run "I love machine learning." --device cuda --precision bf16
