"""Audio layer: PCM formats, G.711, streaming resampling, playout. Imports nothing of ours."""
