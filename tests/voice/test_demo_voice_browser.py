"""Headless Chromium talks to the demo page with a fake microphone (espeak-ng speech from a WAV) and
interrupts the agent by voice over WebRTC."""

from __future__ import annotations

import asyncio
import shutil
import tempfile

import numpy as np
import pytest

from tests import caller_audio as ca
from tests.voice.callers import resample
from tests.webrtc.test_demo_page_browser import FLAGS, needs_browser, wait_for

pytestmark = pytest.mark.browser

LONG = (
    "This is the demo agent reading a long paragraph aloud, and it will keep reading until someone talks over it. " * 8
)


def open_browser_with_mic(profile: str, wav: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from tests.webrtc.test_demo_page_browser import CHROMEDRIVER, CHROMIUM

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    ]:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@needs_browser
async def test_demo_page_is_interrupted_by_the_callers_voice(make_voice_gateway, tmp_path):
    from selenium.webdriver.common.by import By

    gw = await make_voice_gateway()
    # The fake microphone loops this file: 2.5 s of quiet, then the caller speaks (so speech lands while the agent talks).
    speech = ca.speech(16000, "booking")
    wav = ca.write_wav(
        tmp_path / "mic.wav", resample(np.concatenate([ca.silence(2500, 16000), speech]), 16000, 48000), 48000
    )
    profile = tempfile.mkdtemp(prefix="voxgate-chromium-mic-")
    driver = await asyncio.to_thread(open_browser_with_mic, profile, str(wav))
    try:
        await asyncio.to_thread(driver.get, gw.url + "/")
        await wait_for(driver, "document.getElementById('voice').options.length > 0")
        await asyncio.to_thread(lambda: driver.find_element(By.ID, "connect").click())
        await wait_for(driver, "window.voxgate.state === 'connected'")
        assert await asyncio.to_thread(driver.execute_script, "return window.voxgate.mic") == "on"
        started = await wait_for(driver, "window.voxgate.events.find(e => e.type === 'session.started')")
        assert started["input"] == {"microphone": True, "barge_in": "vad"}
        await asyncio.to_thread(driver.execute_script, f"window.voxgate.send({LONG!r}, 'speak')")
        await wait_for(driver, "window.voxgate.events.find(e => e.type === 'audio.start')")
        await wait_for(driver, "window.voxgate.speech.some(e => e.state === 'started')", timeout=20)
        done = await wait_for(driver, "window.voxgate.events.find(e => e.type === 'turn.done')", timeout=20)
        assert done["interrupted"] is True and done["interrupted_by"] == "caller"
        assert await asyncio.to_thread(driver.execute_script, "return window.voxgate.bargeIns") == 1
        row = await asyncio.to_thread(lambda: driver.find_element(By.ID, "turns").text)
        assert "your voice" in row
    finally:
        await asyncio.to_thread(driver.quit)
        shutil.rmtree(profile, ignore_errors=True)
