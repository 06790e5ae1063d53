#!/usr/bin/env bash
# Installs the official qwen-tts 0.1.1 and qwen-asr 0.0.6 (both Apache-2.0) into .venv for
# parity tests and the reference bench only; run-time code never imports them. --no-deps keeps gradio/accelerate
# and a CUDA torch out; the listed packages are what its import needs (docs/development.md).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
pip="$py -m pip"
if $py -c "import qwen_tts, qwen_asr" >/dev/null 2>&1; then exit 0; fi
$pip install -q -c constraints-cpu.txt --no-deps "qwen-tts==0.1.1"
$pip install -q -c constraints-cpu.txt "transformers==4.57.3" einops librosa soundfile sox onnxruntime
# torchaudio from PyPI is a CUDA build whose compiled extension cannot load beside the CPU
# torch; with its .so files removed it falls back to pure Python, which the import needs.
$pip install -q --no-deps torchaudio
ta_lib=$($py -c "import importlib.util, os; s = importlib.util.find_spec('torchaudio'); print(os.path.join(os.path.dirname(s.origin), 'lib'))")
rm -f "$ta_lib"/*.so
$py -c "import qwen_tts" >/dev/null
# qwen-asr's Qwen3ForcedAligner (tests/aligner): --no-deps for the same reasons (it pins another
# transformers and pulls gradio/vllm); its import needs nagisa (a Japanese tokenizer, wheels on PyPI).
$pip install -q -c constraints-cpu.txt --no-deps "qwen-asr==0.0.6"
$pip install -q -c constraints-cpu.txt "nagisa==0.3.0"
$py -c "import qwen_asr" >/dev/null
