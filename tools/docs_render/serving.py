"""Tables of docs/serving.md: load points and abusive clients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import md_table, num


def serve_table(d: Mapping[str, Any]) -> str:
    """mmst-serve under load (``bench/bench_serve.py``): one row per batching mode and number of clients,
    the flood row, the summary and the goals."""
    kinds = ("VadWindows", "FrontEndFrames", "EncoderBlock", "DecoderStep")

    def per_call(r: Mapping[str, Any]) -> str:
        spc = r.get("streams_per_call") or {}
        if r["batching"] != "tick" or not spc:
            return "-"
        return " / ".join(num(spc.get(k), "{:.1f}") for k in kinds)

    def clients(r: Mapping[str, Any]) -> str:
        return f"{r['n']} + 1 flooder" if r.get("flood") else str(r["n"])

    rows = [[r["batching"], num(r.get("compute_workers"), "{:.0f}"), clients(r), f"{num(r['added_latency_ms_p50'], '{:.0f}')} / {num(r['added_latency_ms_p95'], '{:.0f}')}",
             num(r["rtf_max"], "{:.3f}"), num(r["server_cpu_pct"], "{:.0f}") + "%", num(r["cpu_s_per_audio_s"], "{:.3f}"),
             num(r.get("clients_cpu_s"), "{:.1f}"), per_call(r), num(r["peak_rss_mib"], "{:.0f}"),
             num(r["words_per_s"], "{:.1f}"), "yes" if r["realtime"] else "no"]
            for r in d["rows"].values()]
    s, c = d["summary"], d["config"]
    goals = d.get("goals") or {}
    goal_rows = [[f"`{k}`", g["target"], "-" if g["value"] is None else num(g["value"], "{:.3g}") if isinstance(g["value"], float)
                  else str(g["value"]),
                  "met" if g["met"] else "**missed**"] for k, g in goals.items()]
    text = (md_table(["batching", "compute threads", "clients", "added latency p50 / p95 (ms)", "RTF (max client)", "server CPU",
                      "CPU s per audio s", "clients' CPU s", "streams per call (VAD / front end / encoder / decoder)",
                      "peak RSS (MiB)", "words/s", "real time"], rows)
            + f"\n\nAt 8 clients: p95 added latency {num(s['p95_added_latency_ms_8_clients'], '{:.0f}')} ms, "
              f"batched / unbatched CPU cost {num(s['batched_over_unbatched_cost_8_clients'])} "
              f"(at 16: {num(s.get('batched_over_unbatched_cost_16_clients'))}); max real-time clients "
              f"(RTF < 1 and p95 < {num(c['realtime_p95_ms'], '{:.0f}')} ms): {s['max_realtime_clients']}; "
              f"p95 added latency of {c.get('flood_clients', 8)} real-time clients next to a flooder: "
              f"{num(s.get('flood_p95_added_latency_ms'), '{:.0f}')} ms. "
              f"{num(c['seconds_per_client'], '{:.0f}')} s of real-time audio per client, {c['cpus']} CPUs"
              + (f"; {c['note']}" if c.get("note") else "") + ".")
    pairs = d.get("cost_pairs") or {}
    if pairs:
        text += (" The cost ratios are the median over paired runs alternating between a tick and an unbatched "
                 "server, both kept running (tick / unbatched CPU s per audio s per pair: "
                 + "; ".join(f"{n} clients: " + ", ".join(f"{num(p['tick'], '{:.3f}')}/{num(p['off'], '{:.3f}')} = "
                                                          f"{num(p['ratio'])}" for p in ps)
                             for n, ps in pairs.items()) + ").")
    if goal_rows:
        text += "\n\n" + md_table(["goal (2 cores, quickstart xs model)", "target", "measured", ""], goal_rows)
    return text


def serve_abuse_table(d: Mapping[str, Any]) -> str:
    """mmst-serve against abusive clients (``bench/bench_serve_abuse.py``): per abuser, how the server ended
    it, the server's RSS growth, and the real-time client next to it (words exact, client-measured latency)."""
    def ended(a: Mapping[str, Any]) -> str:
        if not a:
            return "-"
        code = a.get("server_close_code") or a.get("close_code")
        code = "/".join(map(str, code)) if isinstance(code, list) else str(code)
        if a.get("still_open_at_end"):  # closed by the server, but the client (not reading) never saw it
            return f"{code} (the client never read the close)"
        return f"{code} after {num(a.get('open_s'), '{:.1f}')} s"

    rows = [[f"`{k}`", ended(r["abuser"]), num(r["rss_growth_mib"], "{:.1f}"),
             "yes" if r["realtime_words_exact"] else "**no**",
             f"{num(r['realtime_client_p50_ms'], '{:.0f}')} / {num(r['realtime_client_p95_ms'], '{:.0f}')}"]
            for k, r in d["rows"].items()]
    c = d["config"]
    goal_rows = [[f"`{k}`", g["target"], num(g["value"], "{:.3g}") if g["value"] is not None else "-",
                  "met" if g["met"] else "**missed**"] for k, g in (d.get("goals") or {}).items()]
    text = (md_table(["abusive client", "closed by the server", "server RSS growth (MiB)",
                      "real-time client's words exact", "real-time client latency p50 / p95 (ms, client-measured)"], rows)
            + f"\n\nOne real-time client ({num(c['seconds'], '{:.0f}')} s of audio, 100 ms int16 frames) per row, "
              f"next to the abusive client; server options `{' '.join(c['server_args'])}`; {c['cpus']} CPUs"
            + (f"; {c['note']}" if c.get("note") else "") + ".")
    if goal_rows:
        text += "\n\n" + md_table(["goal (2 cores, quickstart xs model)", "target", "measured", ""], goal_rows)
    return text
