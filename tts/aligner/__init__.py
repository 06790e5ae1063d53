"""Qwen3-ForcedAligner in plain torch: where each word of a chunk's text is heard in its audio.

Ported from the official `qwen-asr` package (Apache-2.0), which only the parity tests import:
* config.py   - the checkpoint's config.json, checked
* features.py - 24 kHz PCM -> 16 kHz -> Whisper log-mel, as the official processor computes it
* encoder.py  - the audio encoder (chunked convolutions, attention over the clip)
* model.py    - the Qwen3 text decoder and the timestamp head, one non-autoregressive pass
* words.py    - the text's words, the prompt's timestamp slots, and the official monotonic fix-up
* aligner.py  - loading a checkpoint directory and aligning a batch of (audio, text) pairs
* tiny.py     - a tiny random checkpoint in the official layout (tests, CPU runs)
* lane.py     - the aligner beside the Qwen3 engine (`engine.aligner_dir`): each request's words
"""

from tts.aligner.aligner import AlignedWord, ForcedAligner
from tts.aligner.config import AlignerConfig

__all__ = ["AlignedWord", "AlignerConfig", "ForcedAligner"]
