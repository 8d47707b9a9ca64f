"""Tables of docs/serving.md: load points and abusive clients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import md_table, num


def _median(r: Mapping[str, Any], key: str) -> Any:
    """A load point's ``key``: the median over its runs (``{"median", "min", "max"}``), or the one value of a
    run without repetitions."""
    v = r.get(key)
    return v.get("median") if isinstance(v, Mapping) else v


def _range(r: Mapping[str, Any], key: str, fmt: str = "{:.0f}") -> str:
    """``min-max`` of a repeated ``key`` (``-`` when not measured or not repeated)."""
    v = r.get(key)
    if not isinstance(v, Mapping) or v.get("n", 1) < 2:
        return "-"
    return f"{num(v['min'], fmt)}-{num(v['max'], fmt)}"


def _largest(r: Mapping[str, Any], key: str) -> Any:
    v = r.get(key)
    return v.get("max") if isinstance(v, Mapping) else v


#: summary keys of ``bench/bench_serve.py`` read from the abuse benchmark's results (``abuse_results``)
ABUSE_KEYS = ("abuse_rss_growth_mib_max", "abuse_realtime_client_p95_ms_max")


def _goal_rows(d: Mapping[str, Any]) -> list[list[str]]:
    """``key | target | measured | met`` from ``summary.goals`` (``{"goal", "met"}``) or, in runs written
    before it, the top-level ``goals`` (``{"target", "value", "met"}``); an abuse key read from a results file
    whose code had changed when the run started says so."""
    s = d["summary"]
    goals = s.get("goals") or d.get("goals") or {}
    src = d.get("abuse_results") or {}
    out = []
    for k, g in goals.items():
        v = s.get(k, g.get("value"))
        shown = "-" if v is None else num(v, "{:.3g}") if isinstance(v, float) else str(v)
        if v is not None and k in ABUSE_KEYS and src and src.get("changed_since") != []:
            shown += " (from a run whose code has changed since)"
        met = g.get("met")
        out.append([f"`{k}`", g.get("goal") or g.get("target"), shown,
                    "not measured" if met is None else "met" if met else "**missed**"])
    return out


def serve_table(d: Mapping[str, Any]) -> str:
    """mmst-serve under load (``bench/bench_serve.py``): one row per batching mode and number of clients (the
    median over the runs of each load point, the min-max of the client-measured p95), the flood row, the
    summary, the cost pairs, where the abuse keys come from, and the goals."""
    kinds = ("VadWindows", "FrontEndFrames", "EncoderBlock", "DecoderStep")
    s, c = d["summary"], d["config"]
    repeated = "reps" in c

    def per_call(r: Mapping[str, Any]) -> str:
        spc = r.get("streams_per_call") or {}
        if r["batching"] != "tick" or not spc:
            return "-"
        return " / ".join(num(spc.get(k), "{:.1f}") for k in kinds)

    def clients(r: Mapping[str, Any]) -> str:
        return f"{r['n']} + 1 flooder" if r.get("flood") else str(r["n"])

    def pair(r: Mapping[str, Any], a: str, b: str) -> str:
        return f"{num(_median(r, a), '{:.0f}')} / {num(_median(r, b), '{:.0f}')}"

    rows = [[r["batching"], num(r.get("compute_workers"), "{:.0f}"), clients(r), str(len(r.get("reps") or [r])),
             pair(r, "client_latency_ms_p50", "client_latency_ms_p95"), _range(r, "client_latency_ms_p95"),
             pair(r, "added_latency_ms_p50", "added_latency_ms_p95"), num(_median(r, "send_late_ms_p95"), "{:.0f}"),
             num(_largest(r, "rtf_max"), "{:.3f}"), num(_median(r, "server_cpu_pct"), "{:.0f}") + "%",
             num(_median(r, "cpu_s_per_audio_s"), "{:.3f}"), num(_median(r, "clients_cpu_s"), "{:.1f}"), per_call(r),
             num(_largest(r, "peak_rss_mib"), "{:.0f}"), num(_median(r, "words_per_s"), "{:.1f}"),
             ("yes" if r["realtime"] else "no") if repeated else "-"]
            for r in d["rows"].values()]
    text = md_table(["batching", "compute threads", "clients", "runs", "client latency p50 / p95 (ms)",
                     "client p95 min-max (ms)", "added latency p50 / p95 (ms)", "clients' send lateness p95 (ms)",
                     "RTF (max client)", "server CPU", "CPU s per audio s", "clients' CPU s",
                     "streams per call (VAD / front end / encoder / decoder)", "peak RSS (MiB)", "words/s",
                     "real time"], rows)
    limit = num(c["realtime_p95_ms"], "{:.0f}")
    audio = (f"{num(c['seconds_per_client'], '{:.0f}')} s of real-time audio per client, {c['cpus']} CPUs"
             + (f", {num(c['wall_s'], '{:.0f}')} s for the whole run" if c.get("wall_s") else "")
             + (f"; {c['note']}" if c.get("note") else "") + ".")
    if repeated:
        text += (f"\n\nEach load point was run {c['reps']} times, interleaved; the table gives the median over the "
                 f"runs (RTF and peak RSS: the largest). Max real-time clients (at every load point up to it, no "
                 f"client failed, every RTF < 1 and the median client-measured p95 < {limit} ms): "
                 f"{s['max_realtime_clients_client_p95']}; by the server's added latency instead: "
                 f"{s['max_realtime_clients_added_p95']}. At 8 clients: client-measured p95 "
                 f"{num(s.get('client_p95_ms_8_clients'), '{:.0f}')} ms (the server's added latency: "
                 f"{num(s.get('p95_added_latency_ms_8_clients'), '{:.0f}')} ms), batched / unbatched CPU cost "
                 f"{num(s['batched_over_unbatched_cost_8_clients'])} (at 16: "
                 f"{num(s.get('batched_over_unbatched_cost_16_clients'))}); {c.get('flood_clients', 8)} real-time "
                 f"clients next to a flooder: client-measured p95 {num(s.get('flood_client_p95_ms'), '{:.0f}')} ms "
                 f"(added: {num(s.get('flood_p95_added_latency_ms'), '{:.0f}')} ms). " + audio)
    else:
        text += ("\n\nThis run predates the client-measured latency and the repeated load points: one run per load "
                 "point, no client column, and its real time was judged by the server's added latency alone (RTF < 1 "
                 f"and added p95 < {limit} ms: {s.get('max_realtime_clients')} clients). At 8 clients: p95 added "
                 f"latency {num(s.get('p95_added_latency_ms_8_clients'), '{:.0f}')} ms, batched / unbatched CPU cost "
                 f"{num(s['batched_over_unbatched_cost_8_clients'])} (at 16: "
                 f"{num(s.get('batched_over_unbatched_cost_16_clients'))}). " + audio)
    pairs = d.get("cost_pairs") or {}
    if pairs:
        def listed(ps: Any) -> str:
            ps = ps["pairs"] if isinstance(ps, Mapping) else ps
            return ", ".join(f"{num(p['tick'], '{:.3f}')}/{num(p['off'], '{:.3f}')} = {num(p['ratio'])}" for p in ps)

        def ratio_range(ps: Any) -> str:
            r = ps.get("ratio") if isinstance(ps, Mapping) else None
            return f" (median {num(r['median'])}, {num(r['min'])}-{num(r['max'])})" if r else ""

        text += (" The cost ratios pair a tick and an unbatched run of the same clients, one right after the other, "
                 "both servers kept running (tick / unbatched CPU s per audio s per pair: "
                 + "; ".join(f"{n} clients: {listed(ps)}{ratio_range(ps)}" for n, ps in pairs.items()) + ").")
    src = d.get("abuse_results")
    if src:
        changed = src.get("changed_since")
        state = ("the code it measured was unchanged when this run started" if changed == [] else
                 "its dependencies are not recorded" if changed is None else
                 f"the code it measured had changed when this run started ({len(changed)} files)")
        commit = (src.get("git_commit") or "?")[:10]
        exact = s.get("abuse_realtime_words_exact")
        words = ("" if exact is None else "; the real-time client's words were exact next to every abusive client"
                 if exact else "; **the real-time client's words differed** next to an abusive client")
        text += (f" The abuse keys are the summary of `{src['file']}` (`bench/bench_serve_abuse.py`, run on "
                 f"{str(src.get('date') or '?')[:10]} at commit `{commit}`; {state}{words}).")
    goal_rows = _goal_rows(d)
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
