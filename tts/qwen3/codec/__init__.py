"""Qwen3-TTS 12 Hz codec decoder (the vocoder) in plain torch, offline and streaming.

    from tts.qwen3.codec import load_codec_decoder
    dec = load_codec_decoder("ckpt/speech_tokenizer", device="cuda")
    wav = dec.decode(codes)                    # codes [B, T, 16] → float32 [B, T·1920], ±1

Streaming. A `StreamingCodecState` holds per-stream history (frames decoded,
the last window-1 keys/values of each attention layer, and the left context
of every causal and transposed convolution); it is a batch of rows with the
batch on dim 0 of every tensor. `decode_step` continues every row by the
same number of frames t and advances the state in place:

    state = dec.new_state(batch_size)
    pcm = dec.decode_step(codes_chunk, state)  # [B, t, 16] → [B, t·1920]

The step writes the new history into the state's own tensors (their storage
never changes, so an engine can capture the step in a CUDA graph per (B, t)
bucket) and makes no device→host sync; out-of-range codes are clamped there,
while `decode` refuses them with `CodecError('bad_codes')`.

Concatenating the outputs of any chunking equals `decode` of the whole
sequence (to float rounding, ≤ 1e-5 in fp32): nothing is recomputed and no
left context is re-decoded.

Batched engine: rows are independent, so a worker can decode different
streams, each at its own position, in one call. Two ways:

* one persistent slot state for all streams (`slots = dec.new_state(max_streams)`):
  each step `dec.decode_step(codes[B, t, 16], slots, rows=[...])` advances
  just the named rows (gather, one batched step, scatter back: a fixed
  number of kernels whatever B is); `slots.reset([row])` hands a slot to a
  new stream. This is the form for a GPU worker; pass `rows` as a device
  LongTensor (a Python list costs a host→device copy every step).
* a state object per stream (`dec.new_state(1)`), and each step
  `dec.decode_streams(codes[B, t, 16], [state_a, state_b, ...])` — stacks the
  states, runs one batched step, and copies each stream's new history back
  into its own object. Simple, but it costs a few small copies per stream
  per buffer; fine on CPU and for a handful of streams.

All rows of one call advance by the same t; group streams by chunk size.
`state.select(rows)`, `state.assign(rows, sub)`, `StreamingCodecState.stack`
and `state.split()` move rows between the two forms.

Official parity: `decode` equals the official decoder's full forward. The
official `Qwen3TTSTokenizerV2Model.decode` cuts sequences over 300 frames
into chunks with 25 frames of left context, shorter than the released
72-frame window, so beyond 300 frames it drifts from its own full forward;
ours stays exact (and equal to any streamed chunking).

Precision: `load_codec_decoder(dtype=…)` sets the 12.5 Hz part (RVQ
projections, pre-conv, transformer); the upsampling convolutions use
`conv_dtype` (fp32 by default) and SnakeBeta always computes in fp32 (its
exp/reciprocal overflow in half precision and silence the output).

`write_tiny_codec(dir)` writes a small random speech_tokenizer/ folder that
both this loader and the official `qwen-tts` loader accept (real structure,
16 codebooks of 2048, attention window 8); `random_codec_decoder(CodecConfig())`
builds the released shape with random weights for benches.

Imports only torch and safetensors.
"""

from tts.qwen3.codec.config import CodecConfig, CodecError
from tts.qwen3.codec.decoder import CodecDecoder
from tts.qwen3.codec.state import StreamingCodecState
from tts.qwen3.codec.tiny import codec_config_dict, random_codec_decoder, write_tiny_codec
from tts.qwen3.codec.weights import load_codec_decoder

__all__ = [
    "CodecConfig",
    "CodecDecoder",
    "CodecError",
    "StreamingCodecState",
    "codec_config_dict",
    "load_codec_decoder",
    "random_codec_decoder",
    "write_tiny_codec",
]
