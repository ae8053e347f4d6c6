"""Write the dashboard's notification sound, src/wagate/dashboard/static/notify.wav.

Our own sound, made here rather than taken from anywhere: two short sine tones going up (A5, then E6),
about a quarter of a second in all, 16-bit mono at 22050 Hz, at a gentle volume. Each tone fades in
over a few milliseconds and dies away, so it neither clicks nor startles. The output has no timestamp
or randomness: running this again writes the same bytes (on the same Python and platform).

    python scripts/make_notify_wav.py [OUTPUT]
"""

from __future__ import annotations

import math
import struct
import sys
import wave
from pathlib import Path

RATE = 22050
VOLUME = 0.28  # of full scale
ATTACK = 0.006  # seconds of fade-in per tone
GAP = 0.015  # seconds of silence between the tones
TONES = ((880.0, 0.10), (1318.51, 0.135))  # (frequency in Hz, seconds)
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "src/wagate/dashboard/static/notify.wav"


def tone(frequency: float, seconds: float) -> list[float]:
    count = round(seconds * RATE)
    attack = round(ATTACK * RATE)
    samples = []
    for n in range(count):
        rise = min(1.0, n / attack)
        fall = math.exp(-4.0 * n / count) * (1 - n / count)  # decays, reaching zero at the end
        samples.append(math.sin(2 * math.pi * frequency * n / RATE) * rise * fall)
    return samples


def samples() -> list[float]:
    result: list[float] = []
    for index, (frequency, seconds) in enumerate(TONES):
        if index:
            result.extend([0.0] * round(GAP * RATE))
        result.extend(tone(frequency, seconds))
    return result


def write(path: Path) -> None:
    frames = b"".join(struct.pack("<h", round(s * VOLUME * 32767)) for s in samples())
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(frames)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT
    write(path)
    with wave.open(str(path), "rb") as check:
        seconds = check.getnframes() / check.getframerate()
    print(f"wrote {path} ({seconds:.3f} s)")


if __name__ == "__main__":
    main()
