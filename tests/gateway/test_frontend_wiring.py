"""The session speaks each chunk's spoken form: normalised, stressed where the voice asks."""

from tests.conftest import Client
from tts.simulated import SimulatedEngine, SimulatedSettings


class RecordingEngine(SimulatedEngine):
    def __init__(self):
        super().__init__(SimulatedSettings(first_packet_ms=10, capacity_x=500, ms_per_char=10, stream_rtf=0.05))
        self.seen = []

    def synthesize(self, request):
        self.seen.append(request)
        return super().synthesize(request)


async def run_turn(start_gateway, monkeypatch, voices, text, **start):
    from gateway import app

    engine = RecordingEngine()
    monkeypatch.setattr(app, "build_engine", lambda choice: engine)
    gw = await start_gateway({"voices": voices})
    c = await Client.connect(gw)
    await c.start(**start)
    await c.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    done = await c.until("turn.done")
    return engine.seen, done


async def test_numbers_are_normalised_per_language_and_played_text_stays_as_written(start_gateway, monkeypatch):
    requests, done = await run_turn(
        start_gateway, monkeypatch, {"default": {"language": "auto"}}, "Your total is 25 dollars. Ваш заказ 25 рублей."
    )
    spoken = [(r.language, r.text) for r in requests]
    assert spoken[0][0] == "en" and "twenty-five" in spoken[0][1].replace(" ", "-").lower()
    assert spoken[1][0] == "ru" and "двадцать пять" in spoken[1][1].lower()
    assert done["played_text"] == "Your total is 25 dollars. Ваш заказ 25 рублей."


async def test_a_voice_without_normalisation_speaks_text_as_written(start_gateway, monkeypatch):
    requests, _ = await run_turn(start_gateway, monkeypatch, {"raw": {"normalize": False}}, "Call 911 now.")
    assert [r.text for r in requests] == ["Call 911 now."]


async def test_stress_voice_sends_stress_marks_to_the_engine(start_gateway, monkeypatch):
    requests, done = await run_turn(
        start_gateway, monkeypatch, {"stressed": {"language": "ru", "stress": True}}, "Мама мыла раму."
    )
    assert "+" in requests[0].text and requests[0].language == "ru"
    assert done["played_text"] == "Мама мыла раму."
