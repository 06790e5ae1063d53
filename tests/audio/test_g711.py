import warnings

import numpy as np
import pytest

from audio import g711

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop", reason="audioop (the G.711 reference) exists up to Python 3.12")

ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))


def test_ulaw_encode_matches_reference_on_every_int16_value():
    assert g711.ulaw_encode(ALL_SAMPLES) == audioop.lin2ulaw(ALL_SAMPLES.tobytes(), 2)


def test_alaw_encode_matches_reference_on_every_int16_value():
    assert g711.alaw_encode(ALL_SAMPLES) == audioop.lin2alaw(ALL_SAMPLES.tobytes(), 2)


def test_ulaw_decode_matches_reference_on_every_code():
    assert g711.ulaw_decode(ALL_CODES).tobytes() == audioop.ulaw2lin(ALL_CODES, 2)


def test_alaw_decode_matches_reference_on_every_code():
    assert g711.alaw_decode(ALL_CODES).tobytes() == audioop.alaw2lin(ALL_CODES, 2)


def test_round_trip_error_is_bounded_by_the_segment_step():
    x = np.linspace(-30000, 30000, 1001).astype(np.int16)
    for enc, dec in ((g711.ulaw_encode, g711.ulaw_decode), (g711.alaw_encode, g711.alaw_decode)):
        y = dec(enc(x)).astype(np.int32)
        assert np.max(np.abs(y - x) / (np.abs(x.astype(np.int32)) + 128)) < 0.07
