#!/usr/bin/env python
"""Stream a wav file to mmst-serve at real-time speed and print the captions as they arrive.

    python docs/examples/serve_client.py talk.wav [ws://127.0.0.1:8765/ws]
"""
import asyncio
import json
import sys
import time

import soundfile as sf
from websockets.asyncio.client import connect


async def main(path, url="ws://127.0.0.1:8765/ws"):
    audio, rate = sf.read(path, dtype="int16", always_2d=True)
    audio = audio[:, 0]                                   # mono, any supported rate
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": rate, "sample_format": "int16"}))

        async def send():
            step, t0 = rate // 10, time.monotonic()          # 100 ms frames, paced by the clock
            for i in range(0, len(audio), step):
                await asyncio.sleep(max(0, t0 + (i + step) / rate - time.monotonic()))
                await ws.send(audio[i:i + step].astype("<i2").tobytes())
            await ws.send(json.dumps({"type": "end"}))

        sender = asyncio.create_task(send())
        async for message in ws:                             # ends when the server closes
            ev = json.loads(message)
            if ev["type"] == "word":
                lag = ev["emit_ms"] - ev["start_ms"]
                print(f'{ev["lang"]} {ev["start_ms"] / 1000:6.2f}s +{lag:5.0f}ms {ev["text"]}')
            elif ev["type"] == "summary":
                print("summary:", ev)
        await sender
    print("closed:", ws.close_code, ws.close_reason)


asyncio.run(main(*sys.argv[1:]))
