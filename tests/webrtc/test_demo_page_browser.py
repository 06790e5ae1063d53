"""Headless Chromium opens the demo page, calls over WebRTC, talks to the agent and hears audio."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # the `test` extra
    webdriver = None

needs_browser = pytest.mark.skipif(
    webdriver is None or not CHROMIUM or not CHROMEDRIVER,
    reason="needs selenium and Debian chromium + chromium-driver (scripts/install_test_deps.sh installs them as root)",
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
    "--autoplay-policy=no-user-gesture-required",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
]


def open_browser(profile: str):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


async def wait_for(driver, script: str, timeout: float = 15.0):
    """Poll a JS expression in the page until it is truthy (the gateway runs on this event loop)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await asyncio.to_thread(driver.execute_script, f"return {script}")
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            state = await asyncio.to_thread(
                driver.execute_script,
                "return [window.voxgate && window.voxgate.state, window.voxgate && window.voxgate.events.map(e => e.type)]",
            )
            raise TimeoutError(f"{script} stayed false; page state {state}")
        await asyncio.sleep(0.1)


@needs_browser
async def test_demo_page_calls_the_agent_and_plays_audio(gateway):
    profile = tempfile.mkdtemp(prefix="voxgate-chromium-")
    driver = await asyncio.to_thread(open_browser, profile)
    try:
        await asyncio.to_thread(driver.get, gateway.url + "/")
        await wait_for(driver, "document.getElementById('voice').options.length > 0")
        # the page says up front that speaking reaches the agent only with speech to text configured
        note = await wait_for(
            driver,
            "document.getElementById('stt-note').textContent.includes('Speech to text is') && "
            "document.getElementById('stt-note').textContent",
        )
        assert "does not reach it" in note
        await asyncio.to_thread(lambda: driver.find_element(By.ID, "connect").click())
        await wait_for(driver, "window.voxgate.state === 'connected'")

        box = await asyncio.to_thread(driver.find_element, By.ID, "message")
        await asyncio.to_thread(box.send_keys, "Hello, who are you?", Keys.ENTER)
        start = await wait_for(driver, "window.voxgate.events.find(e => e.type === 'audio.start')")
        assert start["turn_id"] == "agent-1" and start["ttfa_ms"] >= 0
        level = await wait_for(driver, "window.voxgate.maxLevel > 0.01 && window.voxgate.maxLevel")
        assert level > 0.01
        await wait_for(driver, "window.voxgate.events.find(e => e.type === 'turn.done')", timeout=20)
        transcript = await asyncio.to_thread(lambda: driver.find_element(By.ID, "transcript").text)
        assert "Hello, who are you?" in transcript and "agent" in transcript
        shot = os.environ.get("VOXGATE_DEMO_SCREENSHOT")
        if shot:
            await asyncio.to_thread(driver.save_screenshot, shot)
    finally:
        await asyncio.to_thread(driver.quit)
        shutil.rmtree(profile, ignore_errors=True)


@needs_browser
async def test_demo_page_lights_the_words_as_heard_and_strikes_the_unheard_after_a_barge_in(gateway):
    profile = tempfile.mkdtemp(prefix="voxgate-chromium-")
    driver = await asyncio.to_thread(open_browser, profile)
    words = "document.querySelectorAll('#transcript .agent .word"
    try:
        await asyncio.to_thread(driver.get, gateway.url + "/")
        await wait_for(driver, "document.getElementById('voice').options.length > 0")
        await asyncio.to_thread(lambda: driver.find_element(By.ID, "connect").click())
        await wait_for(driver, "window.voxgate.state === 'connected'")
        box = await asyncio.to_thread(driver.find_element, By.ID, "message")
        await asyncio.to_thread(box.send_keys, "Please tell me a long story about the sea.", Keys.ENTER)
        await wait_for(driver, "window.voxgate.events.find(e => e.type === 'audio.words')")
        await wait_for(driver, f"{words}.spoken').length >= 2")  # lit while the reply plays
        assert not await asyncio.to_thread(driver.execute_script, f"return {words}.unheard').length")
        await asyncio.to_thread(lambda: driver.find_element(By.ID, "interrupt").click())
        done = await wait_for(driver, "window.voxgate.events.find(e => e.type === 'turn.done')", timeout=20)
        assert done["interrupted"] is True
        spoken = await asyncio.to_thread(
            driver.execute_script, f"return Array.from({words}.spoken')).map(e => e.textContent)"
        )
        unheard = await asyncio.to_thread(driver.execute_script, f"return {words}.unheard').length")
        assert unheard > 0 and " ".join(spoken) == done["played_text"]
    finally:
        await asyncio.to_thread(driver.quit)
        shutil.rmtree(profile, ignore_errors=True)
