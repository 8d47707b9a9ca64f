"""Policies compared at equal latency: read policy sweeps, interpolate, summarise, render.

Input: the sweep folders written by ``eval/simultaneous_eval.py --policy NAME --policy-args p=v1,v2,..``
(``scores.json`` with ``{"policy", "swept_param", "values", "sweep": {point: {"per_lang": {lang:
{metric: value}}, ...}}}``), one per (model, policy).

Comparison at equal latency (for each model and language): wait-k's own point at k (e.g. 3 and 5)
gives a latency ``L_k`` (LAAL, Papi et al. 2022, and separately LAAL_CA; AL is reported beside it,
never compared on: over-generation drives AL below zero); every adaptive policy's BLEU at ``L_k`` is
read off its sweep by linear interpolation between the two neighbouring points (sorted by latency),
and only inside the sweep's latency range (never extrapolated; ``None`` outside).

A policy *beats* wait-k there when ``BLEU(policy at L_k) - BLEU(wait-k at k)`` is above 0 and significant
after Holm's correction (Holm 1979, "A simple sequentially rejective multiple test procedure") over all
the tests of one table (one model and latency metric: every k, language and policy with an interval),
family-wise level ``1 - CI_LEVEL`` (*loses*: significant and below 0; else a *tie*). Each test is a
paired bootstrap (Koehn 2004): one draw of sentence indices (:data:`BOOTSTRAP_SEED`) resamples every
system's sentence statistics (sacrebleu's BLEU), the two neighbouring points interpolated per resample
with the same weight as the point estimate; its two-sided p-value is
``min(1, 2 (min(#{d <= 0}, #{d >= 0}) + 1) / (n + 1))`` over the n resampled differences d
(:func:`bootstrap_difference`), so with n resamples no p-value is below ``2 / (n + 1)`` and Holm over m
tests can only reject with ``n >= 2 m / (1 - CI_LEVEL)`` or so. Without hypotheses on disk
(``<point>/<lang>/instances.log``) the point estimates decide and the row says so.

Training seeds (:func:`equal_latency_seeds`): each seed's model is compared at its own wait-k latency, and the
headline difference is the mean over seeds of ``BLEU(policy at L_k) - BLEU(wait-k at k)``. Its bootstrap draws
the sentence indices once for every seed (the seeds decode the same test sentences), so resample r of the mean
is the mean over seeds of each seed's difference on the same sentences (:func:`bootstrap_mean_difference`);
Holm's correction then runs over the table of these mean differences. With one seed every number equals the
one-seed comparison.

A point whose length ratio ``|Y| / |Y*|`` lies outside :data:`LENGTH_RATIO_RANGE` is flagged (⚑), one that
OmniSTEval's degeneracy test calls likely degenerate (``likely_degenerate``, ``|DSPTV| > 20``;
:mod:`mmst.evaluation.omnisteval_adapter`) is marked †. A comparison that involves such a point (wait-k's, or
either point a policy is interpolated between) is shown but left out of ``beats_waitk`` and of the summary's
count: a win on an artifact is not a win.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mmst.evaluation.omnisteval_adapter import DEGENERATE_DSPTV
from mmst.provenance import run_record

#: length ratios |Y| / |Y*| outside this range are flagged in the tables and plots
LENGTH_RATIO_RANGE = (0.7, 1.4)
#: the confidence level of the paired bootstrap interval (1 - CI_LEVEL: the family-wise level of Holm's correction)
CI_LEVEL = 0.95
#: the decoders' default length cap ``(max_len_a, max_len_b)``; a sweep decoded with another is labelled with it
DEFAULT_CAP = (0.0, 200.0)
#: seed of the one draw of bootstrap sentence indices shared by the systems compared (sacrebleu's default seed)
BOOTSTRAP_SEED = 12345
#: The source paths the policy experiment exercises (``recipes/synthetic/run_policies_hard.sh``: the two
#: models' training, the policy sweeps, this comparison); recorded with their digests in
#: ``provenance.depends_on``.
DEPENDS_ON = ("recipes/synthetic/run_policies_hard.sh", "recipes/synthetic/run_waitk_hard.sh", "recipes/synthetic/conf/",
              "recipes/lib/", "mmst/cli/simultaneous_eval.py", "mmst/cli/policy_results.py", "mmst/features.py", "mmst/data/",
              "mmst/models/", "mmst/losses.py", "mmst/training/", "mmst/simultaneous/", "mmst/evaluation/")


class CompareError(ValueError):
    """A missing or malformed sweep (one-line message naming the file)."""


def load_sweep(path: str | os.PathLike) -> dict[str, Any]:
    """A policy sweep folder -> ``{"policy", "param", "cap", "points": [{"value", "params", "per_lang"}]}``.

    A folder with a single evaluation (no sweep) gives one point. ``cap``: ``[max_len_a, max_len_b]`` from the
    (first) evaluation's config, or None when it records none.

    Raises:
        CompareError: no ``scores.json``, or one without per-language results.
    """
    f = Path(path) / "scores.json"
    if not f.is_file():
        raise CompareError(f"{f}: not found (run eval/simultaneous_eval.py first)")
    obj = json.loads(f.read_text())
    if "sweep" in obj:
        param = obj.get("swept_param") or ("k" if "ks" in obj else None)
        points = []
        for key, entry in obj["sweep"].items():
            params = entry.get("params") or ({"k": int(key[1:])} if key.startswith("k") else {})
            points.append({"value": params.get(param), "params": params, "per_lang": entry["per_lang"],
                           "rtf": entry.get("rtf"), "dir": str(Path(path) / key)})
        first = Path(path) / next(iter(obj["sweep"]), "") / "scores.json"
        cap = _cap(json.loads(first.read_text()).get("config")) if obj["sweep"] and first.is_file() else None
        return {"policy": obj.get("policy", "waitk"), "param": param, "cap": cap, "points": points}
    if "per_lang" not in obj:
        raise CompareError(f"{f}: no per_lang results")
    cfg = obj.get("config", {})
    params = cfg.get("policy_params") or {}
    per_lang = {lang: {m: v for m, v in d.items() if m != "info"} for lang, d in obj["per_lang"].items()}
    return {"policy": cfg.get("policy") or "waitk", "param": None, "cap": _cap(cfg),
            "points": [{"value": None, "params": params, "per_lang": per_lang, "rtf": obj.get("rtf"),
                        "dir": str(Path(path))}]}


def _cap(cfg: Mapping[str, Any] | None) -> list[float] | None:
    return [cfg["max_len_a"], cfg["max_len_b"]] if cfg and cfg.get("max_len_a") is not None \
        and cfg.get("max_len_b") is not None else None


def policy_label(pol: str, sweep: Mapping[str, Any]) -> str:
    """``la[a=0.45,b=5]`` for a sweep decoded with a length cap ``floor(a * S + b)`` other than
    :data:`DEFAULT_CAP` (e.g. one derived from the data's target/source length ratio), else ``pol``."""
    cap = sweep.get("cap")
    if not cap or (float(cap[0]), float(cap[1])) == DEFAULT_CAP:
        return pol
    return f"{pol}[a={float(cap[0]):g},b={float(cap[1]):g}]"


def curve(sweep: Mapping[str, Any], lang: str, metric: str = "AL") -> list[tuple[float, float, Any]]:
    """``[(latency, BLEU, parameter value)]`` of one language, sorted by latency (points lacking a
    metric are left out)."""
    pts = []
    for p in sweep["points"]:
        d = p["per_lang"].get(lang, {})
        if metric in d and "BLEU" in d and d[metric] is not None and d["BLEU"] is not None:
            pts.append((float(d[metric]), float(d["BLEU"]), p["value"]))
    return sorted(pts, key=lambda x: (x[0], x[1]))


def flagged(d: Mapping[str, Any]) -> bool:
    """True when the per-language scores ``d`` have a length ratio outside :data:`LENGTH_RATIO_RANGE`."""
    lr = d.get("length_ratio")
    return lr is not None and not LENGTH_RATIO_RANGE[0] <= float(lr) <= LENGTH_RATIO_RANGE[1]


def degenerate(d: Mapping[str, Any]) -> bool:
    """True when the per-language scores ``d`` say OmniSTEval's degeneracy test flags the point
    (``likely_degenerate``, or ``|DSPTV| > 20`` where only DSPTV is recorded)."""
    if d.get("likely_degenerate") is not None:
        return bool(d["likely_degenerate"])
    return d.get("DSPTV") is not None and abs(float(d["DSPTV"])) > DEGENERATE_DSPTV


def bracket(sweep: Mapping[str, Any], lang: str, metric: str, x: float) -> tuple[dict, dict, float] | None:
    """The two points of ``sweep`` around latency ``x`` on ``lang`` and the interpolation weight ``w`` of the
    upper one (BLEU = ``(1 - w) * lower + w * upper``); None outside the measured range."""
    pts = sorted(((float(p["per_lang"][lang][metric]), i, p) for i, p in enumerate(sweep["points"])
                  if p["per_lang"].get(lang, {}).get(metric) is not None
                  and p["per_lang"][lang].get("BLEU") is not None), key=lambda t: (t[0], t[1]))
    if not pts or x < pts[0][0] or x > pts[-1][0]:
        return None
    for (x0, _, p0), (x1, _, p1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return p0, p1, 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
    return pts[0][2], pts[0][2], 0.0


def _sentences(point: Mapping[str, Any], lang: str) -> tuple[list[str], list[str]] | None:
    from mmst.evaluation.instances import read_instances

    f = Path(point.get("dir") or "") / lang / "instances.log"
    if not point.get("dir") or not f.is_file():
        return None
    ins = read_instances(f)
    return [i.get("prediction") or "" for i in ins], [i.get("reference") or "" for i in ins]


def bootstrap_difference(
    lang: str, base: Mapping[str, Any], lower: Mapping[str, Any], upper: Mapping[str, Any], w: float,
    n_samples: int = 1000,
) -> dict[str, Any] | None:
    """Paired bootstrap of ``BLEU((1 - w) * lower + w * upper) - BLEU(base)`` on ``lang``.

    One draw of ``(n_samples, n_sentences)`` sentence indices (``numpy.random.default_rng(BOOTSTRAP_SEED)``)
    resamples the sentence statistics of all three systems (sacrebleu's BLEU with the language's tokenizer), so
    the resamples are paired; the interpolated BLEU is formed per resample.

    Returns:
        ``{"delta", "low", "high", "p", "resamples", "verdict"}``: ``low``/``high`` the :data:`CI_LEVEL` percentile interval,
        ``p`` the two-sided bootstrap p-value (module docstring), ``verdict`` (``beats`` when the interval lies
        above 0, ``loses`` below, else ``tie``; :func:`equal_latency` replaces it by the corrected verdict), or
        None when a point has no ``instances.log`` or the sentence counts differ.
    """
    return bootstrap_mean_difference(lang, [(base, lower, upper, w)], n_samples)


def bootstrap_mean_difference(
    lang: str, comparisons: Sequence[tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any], float]],
    n_samples: int = 1000,
) -> dict[str, Any] | None:
    """Paired bootstrap of the mean over training seeds of ``BLEU((1 - w) * lower + w * upper) - BLEU(base)``.

    ``comparisons``: one ``(base, lower, upper, w)`` per seed (wait-k's point, the policy's two points around that
    seed's wait-k latency, the weight of the upper one), all decoded on the same test sentences. ONE draw of
    ``(n_samples, n_sentences)`` indices (:data:`BOOTSTRAP_SEED`) resamples every system of every seed, so
    resample r of the mean is the mean over seeds of each seed's difference on the same sentences; with one
    seed this is :func:`bootstrap_difference`, and seeds with identical outputs give exactly its interval.

    Returns:
        as :func:`bootstrap_difference` (``delta``: the mean of the seeds' differences), plus ``per_seed``: each
        seed's own ``{"delta", "low", "high", "p"}`` from the same resamples (uncorrected) when there are two
        seeds or more; None when a point lacks ``instances.log`` or the sentence counts differ.

    Raises:
        CompareError: the seeds' references differ (not the same test set).
    """
    import numpy as np

    data = [comparison_sentences(lang, c[:3]) for c in comparisons]
    if not data or any(d is None for d in data) or len({len(d[0][0]) for d in data}) != 1:
        return None
    if any(d[0][1] != data[0][0][1] for d in data[1:]):
        raise CompareError(f"{lang}: the seeds' references differ; the seeds must be decoded on the same test set")
    idx = np.random.default_rng(BOOTSTRAP_SEED).choice(len(data[0][0][0]), size=(n_samples, len(data[0][0][0])))
    per_seed = [resampled_difference(lang, d, c[3], idx) for d, c in zip(data, comparisons)]  # [(delta, (n,))]
    delta = sum(d for d, _ in per_seed) / len(per_seed)
    diff = np.stack([x for _, x in per_seed]).mean(axis=0)  # (n_samples,): the mean over seeds per resample
    out = percentile_interval(delta, diff)
    if len(per_seed) > 1:
        out["per_seed"] = [{k: v for k, v in percentile_interval(d, x).items() if k in ("delta", "low", "high", "p")}
                           for d, x in per_seed]
    return out


def comparison_sentences(lang: str, points: Sequence[Mapping[str, Any]]) -> list[tuple[list[str], list[str]]] | None:
    """The (hypotheses, references) of each point on ``lang``; None when one lacks them or the counts differ."""
    data = [_sentences(p, lang) for p in points]
    if any(d is None for d in data) or len({len(d[0]) for d in data}) != 1 or not data[0][0]:
        return None
    return data


def resampled_difference(lang: str, data: Sequence[tuple[list[str], list[str]]], w: float, idx: Any) -> tuple[float, Any]:
    """``(delta, diff)`` for the three systems ``data`` (base, lower, upper): the point difference
    ``(1 - w) * lower + w * upper - base`` in BLEU and its value in every resample of ``idx``
    ``(n_samples, n_sentences)``, as an ``(n_samples,)`` array."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    from mmst.evaluation.quality import bleu_tokenizer_for

    metric = BLEU(tokenize=bleu_tokenizer_for(lang)[0])
    samples, points = [], []
    for hyps, refs in data:
        stats = np.array(metric._extract_corpus_statistics(hyps, [refs]), dtype=np.float64)  # (sentences, stats)
        samples.append(np.array([metric._compute_score_from_stats(s).score for s in stats[idx].sum(1)]))
        points.append(metric.corpus_score(hyps, [refs]).score)
    diff = (1 - w) * samples[1] + w * samples[2] - samples[0]
    return (1 - w) * points[1] + w * points[2] - points[0], diff


def percentile_interval(delta: float, diff: Any) -> dict[str, Any]:
    """The :data:`CI_LEVEL` percentile interval, two-sided p-value and verdict of the resampled differences
    ``diff`` ``(n_samples,)`` around the point difference ``delta`` (module docstring)."""
    import numpy as np

    a = (1 - CI_LEVEL) / 2 * 100
    low, high = (float(v) for v in np.percentile(diff, [a, 100 - a]))
    p = min(1.0, 2.0 * (min(int((diff <= 0).sum()), int((diff >= 0).sum())) + 1) / (len(diff) + 1))
    verdict = "beats" if low > 0 else "loses" if high < 0 else "tie"
    return {"delta": delta, "low": low, "high": high, "p": p, "resamples": len(diff), "verdict": verdict}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given: with ``p_(1) <= ... <= p_(m)``,
    ``p_adj(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where ``p_adj <= alpha`` keeps the
    family-wise error rate at ``alpha``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out, run = [0.0] * len(pvalues), 0.0
    for j, i in enumerate(order):
        run = max(run, min(1.0, (len(pvalues) - j) * float(pvalues[i])))
        out[i] = run
    return out


def _correct_table(table: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Holm over every bootstrap test of one table (all k, languages and policies): each interval gets ``p_holm``
    and its corrected ``verdict`` (the interval's own in ``verdict_uncorrected``); ``beats_waitk`` keeps the
    policies whose corrected verdict is ``beats`` and ``best`` follows."""
    tests = [ci for row in table.values() for r in row.values() for ci in r["ci"].values() if ci is not None]
    alpha = 1.0 - CI_LEVEL
    for ci, p_adj in zip(tests, holm([ci["p"] for ci in tests])):
        ci["p_holm"], ci["verdict_uncorrected"] = p_adj, ci["verdict"]
        ci["verdict"] = "tie" if p_adj > alpha else "beats" if ci["delta"] > 0 else "loses"
    for row in table.values():
        for r in row.values():
            r["beats_waitk"] = [p for p in r["beats_waitk"] if r["ci"].get(p) is None or r["ci"][p]["verdict"] == "beats"]
            r["best"] = max(r["beats_waitk"], key=lambda p: r["adaptive"][p]) if r["beats_waitk"] else "waitk"


def interpolate(points: Sequence[tuple[float, float, Any]], x: float) -> float | None:
    """Piecewise-linear value at latency ``x`` of ``points`` sorted by latency; None outside
    ``[min, max]`` latency (no extrapolation). Equal latencies average their BLEU."""
    if not points:
        return None
    xs = [p[0] for p in points]
    if x < xs[0] or x > xs[-1]:
        return None
    merged: dict[float, list[float]] = {}
    for lat, b, _ in points:
        merged.setdefault(lat, []).append(b)
    pts = sorted((lat, sum(bs) / len(bs)) for lat, bs in merged.items())
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[0][1]  # a single point equal to x


def equal_latency(
    sweeps: Mapping[str, Mapping[str, Any]], langs: Sequence[str], ks: Sequence[int] = (3, 5), metric: str = "LAAL",
    bootstrap: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """For one model's ``{policy: sweep}``: ``{f"k{k}": {lang: {"waitk": {"latency", "BLEU", "AL",
    "length_ratio"}, "adaptive": {policy: BLEU or None}, "ci": {policy: bootstrap_difference or None},
    "flagged": [policies whose neighbouring points have a length ratio outside the range], "degenerate":
    [policies with a likely degenerate neighbouring point], "excluded": [policies whose comparison is left out:
    flagged, degenerate, or every policy when wait-k's own point is], "best": policy, "beats_waitk": [policies]}}}``
    (``waitk`` also has ``flagged`` and ``degenerate``).

    ``beats_waitk``: a higher BLEU, significant after Holm's correction over every test of this table
    (``bootstrap`` paired resamples, module docstring; with 0, or without hypotheses on disk, a higher point
    estimate), leaving out the ``excluded`` policies; ``best``: the highest BLEU among them, else ``waitk``.

    Raises:
        CompareError: no wait-k sweep, or wait-k lacks a k.
    """
    out = {f"k{k}": {lang: _row([_seed_comparison(sweeps, lang, k, metric)], lang, bootstrap) for lang in langs}
           for k in ks}
    _correct_table(out)
    return out


def equal_latency_seeds(
    sweeps_by_seed: Mapping[str, Mapping[str, Mapping[str, Any]]], langs: Sequence[str], ks: Sequence[int] = (3, 5),
    metric: str = "LAAL", bootstrap: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`equal_latency` over training seeds: ``sweeps_by_seed`` is ``{seed name: {policy: sweep}}`` of one model,
    every seed decoded on the same test sentences with the same grids.

    Each seed is compared at its own wait-k latency (its wait-k point at k). The headline row has the shape of
    :func:`equal_latency`'s, with means over seeds: ``waitk`` (latency, BLEU, AL, length ratio; ``flagged`` and
    ``degenerate`` when any seed's point is), ``adaptive`` (None unless every seed's sweep reaches its wait-k
    latency), ``difference`` (``{policy: mean over seeds of (policy BLEU - wait-k BLEU)}``, the headline), ``ci``
    (:func:`bootstrap_mean_difference`: one draw of sentence indices for every seed), and ``flagged``,
    ``degenerate``, ``excluded`` (the union over seeds: a win that rests on an artifact in one seed is not a
    win). ``beats_waitk``: a mean difference above 0, significant after Holm's correction over the table (with
    ``bootstrap`` 0 or no hypotheses on disk, a mean difference above 0). ``per_seed``: ``{seed: {"waitk",
    "adaptive", "difference", "ci": {policy: {"delta", "low", "high", "p"} (uncorrected) or None}}}``. With one seed
    every number equals :func:`equal_latency`'s.

    Raises:
        CompareError: a seed without a wait-k sweep or its k, seeds with different policies, or seeds whose
            references differ.
    """
    names = list(sweeps_by_seed)
    if not names:
        raise CompareError("no seeds to compare")
    pols = {n: sorted(sw) for n, sw in sweeps_by_seed.items()}
    if any(p != pols[names[0]] for p in pols.values()):
        raise CompareError(f"the seeds have different policy sweeps: {pols}")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for k in ks:
        out[f"k{k}"] = {}
        for lang in langs:
            per = [_seed_comparison(sweeps_by_seed[n], lang, k, metric) for n in names]
            row = _row(per, lang, bootstrap)
            row["difference"] = {p: mean_or_none([_minus(c["adaptive"][p], c["waitk"]["BLEU"]) for c in per]) for p in row["adaptive"]}
            row["per_seed"] = {n: _seed_record(c, row["ci"], i, len(names)) for i, (n, c) in enumerate(zip(names, per))}
            for r in row["ci"].values():
                if r is not None:
                    r.pop("per_seed", None)  # kept once, in row["per_seed"]
            out[f"k{k}"][lang] = row
    _correct_table(out)
    return out


def _seed_comparison(sweeps: Mapping[str, Mapping[str, Any]], lang: str, k: int, metric: str) -> dict[str, Any]:
    """One seed's comparison on ``lang`` at wait-k's ``k``: ``{"point": wait-k's point, "waitk": {"latency",
    "BLEU", "AL", "length_ratio", "flagged", "degenerate"}, "adaptive": {policy: BLEU interpolated at wait-k's
    latency or None}, "bracket": {policy: (lower, upper, w) or None} (:func:`bracket`), "flagged", "degenerate":
    [policies]}``.

    Raises:
        CompareError: no wait-k sweep, or wait-k lacks k.
    """
    if "waitk" not in sweeps:
        raise CompareError("the comparison needs a wait-k sweep")
    wk = [p for p in sweeps["waitk"]["points"] if p["params"].get("k") == k]
    if not wk or metric not in wk[0]["per_lang"].get(lang, {}):
        raise CompareError(f"wait-k sweep has no k={k} {metric} for {lang}")
    d = wk[0]["per_lang"][lang]
    lat, bleu = float(d[metric]), float(d["BLEU"])
    ada, brackets, flags, degen = {}, {}, [], []
    for pol, sw in sweeps.items():
        if pol == "waitk":
            continue
        ada[pol] = interpolate(curve(sw, lang, metric), lat)
        br = brackets[pol] = bracket(sw, lang, metric, lat)
        if br and (flagged(br[0]["per_lang"][lang]) or flagged(br[1]["per_lang"][lang])):
            flags.append(pol)
        if br and (degenerate(br[0]["per_lang"][lang]) or degenerate(br[1]["per_lang"][lang])):
            degen.append(pol)
    return {"point": wk[0], "waitk": {"latency": lat, "BLEU": bleu, "AL": d.get("AL"), "length_ratio": d.get("length_ratio"),
                                      "flagged": flagged(d), "degenerate": degenerate(d)},
            "adaptive": ada, "bracket": brackets, "flagged": flags, "degenerate": degen}


def _row(per: Sequence[Mapping[str, Any]], lang: str, bootstrap: int) -> dict[str, Any]:
    """The comparison row of :func:`equal_latency` from the seeds' :func:`_seed_comparison` (means over seeds;
    one seed: its own values), before Holm's correction."""
    wks = [c["waitk"] for c in per]
    waitk = {key: mean_or_none([w[key] for w in wks]) for key in ("latency", "BLEU", "AL", "length_ratio")}
    waitk.update(flagged=any(w["flagged"] for w in wks), degenerate=any(w["degenerate"] for w in wks))
    ada, ci = {}, {}
    for pol in per[0]["adaptive"]:
        ada[pol] = mean_or_none([c["adaptive"][pol] for c in per])
        brs = [c["bracket"][pol] for c in per]
        ci[pol] = bootstrap_mean_difference(lang, [(c["point"], *br) for c, br in zip(per, brs)], bootstrap) \
            if bootstrap and all(brs) else None
    flags = sorted({p for c in per for p in c["flagged"]})
    degen = sorted({p for c in per for p in c["degenerate"]})
    excluded = sorted(ada if waitk["flagged"] or waitk["degenerate"] else set(flags) | set(degen))
    diff = {p: mean_or_none([_minus(c["adaptive"][p], c["waitk"]["BLEU"]) for c in per]) for p in ada}
    beats = sorted(p for p, b in ada.items() if b is not None and p not in excluded
                   and (ci[p]["verdict"] == "beats" if ci[p] is not None else diff[p] > 0))
    best = max(beats, key=lambda p: ada[p]) if beats else "waitk"
    return {"waitk": waitk, "adaptive": ada, "ci": ci, "flagged": flags, "degenerate": degen, "excluded": excluded,
            "best": best, "beats_waitk": beats}


def _seed_record(c: Mapping[str, Any], ci: Mapping[str, Any], i: int, n_seeds: int) -> dict[str, Any]:
    """Seed ``i``'s entry of a row's ``per_seed``: its wait-k point, policy BLEU, difference and uncorrected interval
    (from the shared resamples of ``ci``, the row's intervals)."""
    def seed_ci(r: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if r is None:
            return None
        own = r["per_seed"][i] if n_seeds > 1 else r
        return {key: own[key] for key in ("delta", "low", "high", "p")}

    return {"waitk": c["waitk"], "adaptive": c["adaptive"],
            "difference": {p: _minus(b, c["waitk"]["BLEU"]) for p, b in c["adaptive"].items()},
            "ci": {p: seed_ci(r) for p, r in ci.items()}}


def mean_or_none(values: Sequence[float | None]) -> float | None:
    """The mean of ``values``; None when one is None; a single value is returned as it is."""
    if any(v is None for v in values) or not values:
        return None
    return values[0] if len(values) == 1 else sum(float(v) for v in values) / len(values)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def waitk_range_coverage(sweeps: Mapping[str, Mapping[str, Any]], langs: Sequence[str], ks: Sequence[int] = range(1, 6),
                         metric: str = "LAAL") -> dict[str, dict[str, dict[str, Any]]]:
    """How far each adaptive sweep of one model reaches over wait-k's ``metric`` range for ``ks`` (k=1..5):
    ``{policy: {lang: {"waitk": [low, high], "waitk_ks": [k of low, k of high], "sweep": [low, high] or None,
    "unreached": ["low"] and/or ["high"]}}}`` (ms). ``low`` is unreached when the sweep's lowest latency is
    above wait-k's lowest (its comparisons there are dashes), ``high`` when its highest is below wait-k's highest;
    a sweep without a point on ``lang`` reaches neither end.

    Raises:
        CompareError: no wait-k sweep, or none of ``ks`` has ``metric`` on a language.
    """
    if "waitk" not in sweeps:
        raise CompareError("the comparison needs a wait-k sweep")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for lang in langs:
        wk = sorted((float(p["per_lang"][lang][metric]), p["params"]["k"]) for p in sweeps["waitk"]["points"]
                    if p["params"].get("k") in ks and p["per_lang"].get(lang, {}).get(metric) is not None)
        if not wk:
            raise CompareError(f"wait-k sweep has no {metric} for {lang} at any k of {list(ks)}")
        (lo, k_lo), (hi, k_hi) = wk[0], wk[-1]
        for pol, sw in sweeps.items():
            if pol == "waitk":
                continue
            xs = [x for x, _, _ in curve(sw, lang, metric)]
            rng = [xs[0], xs[-1]] if xs else None
            unreached = ([] if rng and rng[0] <= lo else ["low"]) + ([] if rng and rng[1] >= hi else ["high"])
            out.setdefault(pol, {})[lang] = {"waitk": [lo, hi], "waitk_ks": [k_lo, k_hi], "sweep": rng,
                                             "unreached": unreached}
    return out


def coverage_markdown(cov: Mapping[str, Mapping[str, Mapping[str, Any]]], sweeps: Mapping[str, Any],
                      metric: str = "LAAL") -> list[str]:
    """Markdown lines: the sweeps of :func:`waitk_range_coverage` that miss an end of wait-k's range, one row
    each, or one line saying every sweep covers it."""
    rows = [(pol, lang, c) for pol, per in cov.items() for lang, c in per.items() if c["unreached"]]
    if not rows:
        return [f"Every sweep covers wait-k's {metric} range on every language.", ""]
    md = [f"| policy | lang | wait-k {metric} (ms) | sweep {metric} (ms) | end not reached |", "|---|---|---|---|---|"]
    for pol, lang, c in rows:
        (lo, hi), (k_lo, k_hi) = c["waitk"], c["waitk_ks"]
        sw = f"{_f(c['sweep'][0], 0)} to {_f(c['sweep'][1], 0)}" if c["sweep"] else "–"
        ends = ", ".join(f"{'low (k=' + str(k_lo) if e == 'low' else 'high (k=' + str(k_hi)})" for e in c["unreached"])
        md.append(f"| {policy_label(pol, sweeps.get(pol, {}))} | {lang} | {_f(lo, 0)} to {_f(hi, 0)} | {sw} | {ends} |")
    return md + [""]


def summary(eq_offline: Mapping[str, Mapping[str, Any]],
            sweeps: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None, metric: str = "LAAL", *,
            seeds: Sequence[int] | None = None, test_split: str | None = None,
            tune_split: str | None = None) -> dict[str, Any]:
    """The headline object from the offline model's comparison at equal ``metric``: languages (of all)
    where some adaptive policy beats wait-k, per k, the comparisons left out of that count (on a ⚑ or † point), and the best policy per language and k; with
    ``sweeps`` (``{model: {policy: sweep}}``), over every reported point of every policy and language
    (``correction``: Holm's, its family-wise level, the number of bootstrap tests in the table and
    ``smallest_p_holm``, the corrected p-value of a win in every resample, ``m * 2 / (n + 1)``: above the level,
    no win can survive with these n resamples):
    ``min_laal_ms``, ``max_length_ratio``, ``min_length_ratio`` and ``points_per_policy_min`` (the fewest
    points of any policy's sweep). The protocol, each key only when given: ``seeds`` (the training seeds whose
    mean difference ``eq_offline`` holds, :func:`equal_latency_seeds`; then also ``interval``: its level, kind and
    resamples, one draw of sentence indices shared by every seed), ``test_split`` (where the comparison is
    reported) and ``tune_split`` (where the grids and the length cap were chosen)."""
    langs = sorted({lang for row in eq_offline.values() for lang in row})
    cis = [ci for row in eq_offline.values() for r in row.values() for ci in r["ci"].values() if ci is not None]
    n_min = min((ci.get("resamples") or 0 for ci in cis), default=0)
    out: dict[str, Any] = {
        "metric": metric,
        "correction": {"method": "holm", "family_wise_level": round(1.0 - CI_LEVEL, 10), "tests": len(cis),
                       "smallest_p_holm": min(1.0, len(cis) * 2.0 / (n_min + 1)) if cis and n_min else None},
        "langs_adaptive_beats_waitk_offline_model": {
            kk: sum(1 for lang in row if row[lang]["beats_waitk"]) for kk, row in eq_offline.items()},
        "comparisons_excluded": {kk: sum(len(row[lang].get("excluded", [])) for lang in row)
                                 for kk, row in eq_offline.items()},
        "best_policy_per_lang": {lang: {kk: row[lang]["best"] for kk, row in eq_offline.items()} for lang in langs},
    }
    if sweeps is not None:
        laal, ratios, counts = [], [], []
        for per_model in sweeps.values():
            for sw in per_model.values():
                counts.append(len(sw["points"]))
                for p in sw["points"]:
                    for d in p["per_lang"].values():
                        if d.get("LAAL") is not None:
                            laal.append(float(d["LAAL"]))
                        if d.get("length_ratio") is not None:
                            ratios.append(float(d["length_ratio"]))
        out.update({"min_laal_ms": min(laal) if laal else None,
                    "max_length_ratio": max(ratios) if ratios else None,
                    "min_length_ratio": min(ratios) if ratios else None,
                    "points_per_policy_min": min(counts) if counts else None})
    if seeds is not None:
        out["seeds"] = list(seeds)
        out["interval"] = {"level": CI_LEVEL, "kind": "paired bootstrap percentile interval (Koehn 2004)",
                           "resamples": n_min or None, "indices": "one draw of sentence indices shared by every seed",
                           "difference": "mean over seeds of (policy BLEU at the seed's wait-k latency - wait-k BLEU)"}
    for key, value in (("test_split", test_split), ("tune_split", tune_split)):
        if value is not None:
            out[key] = value
    return out


def seeds_headline(res: Mapping[str, Any]) -> str:
    """The headline sentence of a results object whose summary has ``seeds``: it names the test set, the seeds,
    the split the grids were tuned on, the interval and the correction, then the count per k."""
    s = res["summary"]
    corr, ci = s.get("correction") or {}, s.get("interval") or {}
    counts = ", ".join(f"k={kk[1:]}: **{v}**" for kk, v in s["langs_adaptive_beats_waitk_offline_model"].items())
    excl = s.get("comparisons_excluded") or {}
    return (f"On {s.get('test_split') or res.get('split')} (first {res.get('n_utterances')} utterances), with training "
            f"seeds {', '.join(str(x) for x in s['seeds'])} and grids and length cap chosen on "
            f"{s.get('tune_split') or 'a split not recorded'}: languages (of {len(res['langs'])}) where an adaptive "
            f"policy's BLEU at wait-k's own {s.get('metric', 'LAAL')}, minus wait-k's, averaged over the seeds, is "
            f"above 0 (offline-trained model; " + (
                f"{ci.get('level', CI_LEVEL) * 100:.0f}% paired bootstrap interval over {ci.get('resamples')} "
                f"resamples of the same sentences in every seed; a win not significant after Holm's correction over "
                f"the {corr['tests']} tests of the table, family-wise level "
                f"{corr.get('family_wise_level', 1 - CI_LEVEL):g}, is a tie" if corr.get("tests") else
                "no bootstrap interval and no correction: no hypotheses on disk or --bootstrap 0, so the mean point "
                "difference decides") + f"): {counts}"
            + ("; comparisons left out for a length-ratio outlier (⚑) or a likely degenerate point (†) in any seed: "
               + ", ".join(f"k={kk[1:]}: {v}" for kk, v in excl.items()) if any(excl.values()) else "") + ".")


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The results JSON's provenance record (:func:`mmst.provenance.run_record`) for ``argv``
    (default: this process's command line), with the experiment's :data:`DEPENDS_ON`."""
    return run_record(shlex.join(["python", *argv]) if argv is not None else None, depends_on=DEPENDS_ON)


def plot_policies(
    sweeps: Mapping[str, Mapping[str, Any]], langs: Sequence[str], path: str | os.PathLike, title: str
) -> Path:
    """One panel per language and latency metric (rows: LAAL, LAAL_CA, AL), one BLEU-vs-latency curve per
    policy; a point whose length ratio is outside :data:`LENGTH_RATIO_RANGE`, or that is likely degenerate
    (:func:`degenerate`), is drawn as a red cross."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = ("LAAL", "LAAL_CA", "AL")
    fig, axes = plt.subplots(len(metrics), len(langs), figsize=(3.6 * len(langs), 3.2 * len(metrics)), squeeze=False)
    for r, metric in enumerate(metrics):
        for c, lang in enumerate(langs):
            ax = axes[r][c]
            for pol, sw in sweeps.items():
                pts = curve(sw, lang, metric)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=pol)
                bad = [p["per_lang"][lang] for p in sw["points"]
                       if (flagged(p["per_lang"].get(lang, {})) or degenerate(p["per_lang"].get(lang, {})))
                       and p["per_lang"][lang].get(metric) is not None and p["per_lang"][lang].get("BLEU") is not None]
                if bad:
                    ax.plot([d[metric] for d in bad], [d["BLEU"] for d in bad], "x", color="red", ms=7,
                            label=None)
            ax.set_title(f"{lang}: BLEU vs {metric}", fontsize=9)
            ax.set_xlabel(f"{metric} (ms)", fontsize=8)
            ax.grid(True, alpha=0.3)
            if c == 0:
                ax.set_ylabel("BLEU")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _f(v: Any, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def _cell(r: Mapping[str, Any], pol: str) -> str:
    b = r["adaptive"].get(pol)
    if b is None:
        return "–"
    ci = (r.get("ci") or {}).get(pol)
    holm_p = f" p_holm {ci['p_holm']:.2g}" if ci and ci.get("p_holm") is not None else ""
    txt = _f(b) + (f" ({ci['delta']:+.1f} [{ci['low']:+.1f}, {ci['high']:+.1f}]{holm_p} {ci['verdict']})" if ci else "")
    return txt + (" ⚑" if pol in r.get("flagged", []) else "") + (" †" if pol in r.get("degenerate", []) else "")


def _seed_cell(c: Mapping[str, Any], pol: str) -> str:
    """A per-seed table cell: the seed's policy BLEU, its difference to wait-k and uncorrected interval."""
    b = c["adaptive"].get(pol)
    if b is None:
        return "–"
    ci = (c.get("ci") or {}).get(pol)
    d = c["difference"].get(pol)
    inner = f"{ci['delta']:+.1f} [{ci['low']:+.1f}, {ci['high']:+.1f}]" if ci else f"{d:+.1f}"
    return f"{_f(b)} ({inner})"


def _per_seed_table(eq: Mapping[str, Any], langs: Sequence[str], pols: Sequence[str], labels: Sequence[str],
                    metric: str) -> list[str]:
    """Markdown lines: every seed's own comparison at its wait-k ``metric`` (rows lang x k x seed)."""
    md = [f"#### Per seed, each at its own wait-k {metric} (difference to wait-k and uncorrected interval)", "",
          f"| lang | k | seed | wait-k {metric} (ms) | wait-k BLEU | " + " | ".join(labels) + " |",
          "|---|---|---|---|---|" + "---|" * len(pols)]
    for kk, row in eq.items():
        for lang in langs:
            for seed, c in row[lang].get("per_seed", {}).items():
                md.append(f"| {lang} | {kk[1:]} | {seed} | {_f(c['waitk']['latency'], 0)} | {_f(c['waitk']['BLEU'])} | "
                          + " | ".join(_seed_cell(c, p) for p in pols) + " |")
    return md + [""]


def _sweeps_table(sweeps: Mapping[str, Mapping[str, Any]], langs: Sequence[str]) -> list[str]:
    """Markdown lines: every point of every sweep (parameters, BLEU, latencies, length ratio with its flags, RTF)."""
    md = ["| policy | parameters | lang | BLEU | LAAL | AL | LAAL_CA | |Y|/|Y*| | RTF |",
          "|---|---|---|---|---|---|---|---|---|"]
    for pol, sw in sweeps.items():
        for p in sw["points"]:
            par = ", ".join(f"{k}={v}" for k, v in p["params"].items())
            for lang in langs:
                d = p["per_lang"].get(lang, {})
                md.append(f"| {policy_label(pol, sw)} | {par} | {lang} | {_f(d.get('BLEU'))} | {_f(d.get('LAAL'), 0)} | "
                          f"{_f(d.get('AL'), 0)} | {_f(d.get('LAAL_CA'), 0)} | "
                          f"{_f(d.get('length_ratio'), 2)}{' ⚑' if flagged(d) else ''}{' †' if degenerate(d) else ''} | {_f(p.get('rtf'), 3)} |")
    return md


def _model_lines(info: Mapping[str, Any], langs: Sequence[str]) -> list[str]:
    """Markdown lines: the checkpoint(s) a model's sweeps decoded and the offline greedy BLEU it reached (with
    seeds: the mean, each seed's in brackets)."""
    md = []
    if info.get("updates_per_seed"):
        md += ["Checkpoints decoded: " + ", ".join(f"{seed} {n} updates" for seed, n in info["updates_per_seed"].items())
               + ".", ""]
    elif info.get("updates") is not None:
        md += [f"Checkpoint decoded: {info['updates']} updates.", ""]
    per_seed = info.get("offline_bleu_per_seed")
    if info.get("offline_bleu") and per_seed:
        md += ["Offline greedy BLEU (the quality it reached), mean over seeds: " + ", ".join(
            f"{lang} {_f(info['offline_bleu'].get(lang))} ("
            + ", ".join(f"{seed} {_f(b.get(lang))}" for seed, b in per_seed.items()) + ")" for lang in langs) + ".", ""]
    elif info.get("offline_bleu"):
        md += ["Offline greedy BLEU (the quality it reached): " + ", ".join(
            f"{lang} {_f(info['offline_bleu'].get(lang))}" for lang in langs) + ".", ""]
    return md


def render_markdown(res: Mapping[str, Any]) -> str:
    """The results Markdown (every number from ``res``, the object written as JSON). With training seeds
    (``summary["seeds"]``, :func:`equal_latency_seeds`) the tables give means over seeds, each followed by every
    seed's own comparison, and the sweeps of every seed (``res["sweeps_by_seed"]``)."""
    s = res["summary"]
    langs = res["langs"]
    metric0 = s.get("metric", "AL")
    seeds = s.get("seeds")
    md = [f"# {res['title']}", "",
          f"Command: `{res['provenance']['command']}`  ",
          f"Date: {res['provenance']['date']}, commit `{res['provenance']['git_commit']}`, "
          f"{res['provenance']['machine'].get('cpu_model') or res['provenance']['machine'].get('cpu')} ({res['provenance']['machine']['cores']} cores), "
          f"torch {res['provenance']['machine']['torch']}.  ",
          f"Test set: {res['split']}, first {res['n_utterances']} utterances; segments of "
          f"{res['segment_ms']:.0f} ms; joint decoding of {', '.join(langs)}; greedy."
          + (f" Training seeds {', '.join(str(x) for x in seeds)}: the tables give the mean over seeds (each seed at "
             f"its own wait-k latency), then every seed; grids and length cap chosen on "
             f"{s.get('tune_split') or 'a split not recorded'}." if seeds else ""), ""]
    if seeds:
        md += ["## Summary", "", seeds_headline(res), ""]
    else:
        md += ["## Summary", "",
               f"Languages (of {len(langs)}) where an adaptive policy scores more BLEU than wait-k at wait-k's own "
               f"{metric0} (offline-trained model; a win not significant after Holm's correction over the "
               f"{(s.get('correction') or {}).get('tests', 0)} paired bootstrap tests of the table is a tie): "
               f"k=3: **{s['langs_adaptive_beats_waitk_offline_model']['k3']}**, "
               f"k=5: **{s['langs_adaptive_beats_waitk_offline_model']['k5']}**"
               + ("; comparisons left out for a length-ratio outlier (⚑) or a likely degenerate point (†): "
                  + ", ".join(f"k={kk[1:]}: {v}" for kk, v in s["comparisons_excluded"].items())
                  if any((s.get("comparisons_excluded") or {}).values()) else "") + ".", ""]
    corr = s.get("correction") or {}
    if corr.get("smallest_p_holm") is not None and corr["smallest_p_holm"] > 1.0 - CI_LEVEL:
        md += [f"With these bootstrap resamples no win could survive the correction (even a win in every "
               f"resample has p_holm {corr['smallest_p_holm']:.2g}): more resamples are needed "
               "(mmst-policy-results --bootstrap).", ""]
    if s.get("points_per_policy_min") is not None:
        md += [f"Over every point of every sweep{' of every seed' if seeds else ''}: lowest LAAL {_f(s['min_laal_ms'], 0)} ms, length ratio "
               f"{_f(s['min_length_ratio'], 2)} to {_f(s['max_length_ratio'], 2)}, at least "
               f"{s['points_per_policy_min']} points per policy.", ""]
    md += [f"| lang | best at k=3 {metric0} | best at k=5 {metric0} |", "|---|---|---|"]
    for lang in langs:
        b = s["best_policy_per_lang"][lang]
        md.append(f"| {lang} | {b['k3']} | {b['k5']} |")
    md.append("")
    for model, info in res["models"].items():
        md += [f"## {model} model", "", info.get("description", ""), ""]
        md += _model_lines(info, langs)
        for metric, eq in res["equal_latency"][model].items():
            pols = sorted({p for row in eq.values() for lang in row for p in row[lang]["adaptive"]})
            labels = [policy_label(p, res["sweeps"][model].get(p, {})) for p in pols]
            md += [f"### BLEU at wait-k's {metric} (k=3, k=5){', mean over seeds' if seeds else ''}", "",
                   f"| lang | k | wait-k {metric} (ms) | wait-k AL (ms) | wait-k |Y|/|Y*| | wait-k BLEU | "
                   + " | ".join(labels) + " | best |",
                   "|---|---|---|---|---|---|" + "---|" * len(pols) + "---|"]
            for kk, row in eq.items():
                for lang in langs:
                    r = row[lang]
                    w = r["waitk"]
                    md.append(f"| {lang} | {kk[1:]} | {_f(w['latency'], 0)} | {_f(w.get('AL'), 0)} | "
                              f"{_f(w.get('length_ratio'), 2)}{' ⚑' if w.get('flagged') else ''}{' †' if w.get('degenerate') else ''} | {_f(w['BLEU'])} | "
                              + " | ".join(_cell(r, p) for p in pols) + f" | {r['best']} |")
            md.append("")
            if seeds:
                md += _per_seed_table(eq, langs, pols, labels, metric)
        if (res.get("coverage") or {}).get(model) is not None:
            md += [f"### Reach of each sweep over wait-k's LAAL range (k=1..5){f', seed {seeds[0]}' if seeds else ''}", ""]
            md += coverage_markdown(res["coverage"][model], res["sweeps"][model])
        by_seed = (res.get("sweeps_by_seed") or {}).get(model)
        for seed, sweeps in (by_seed.items() if seeds and by_seed else [(None, res["sweeps"][model])]):
            md += [f"### Sweeps{', ' + seed if seed else ''}", ""] + _sweeps_table(sweeps, langs) + [""]
        if info.get("plot"):
            md += [f"![{model}: BLEU vs LAAL, LAAL_CA and AL per policy]({info['plot']})", ""]
    lo, hi = LENGTH_RATIO_RANGE
    md += ["A dash: wait-k's latency lies outside that policy's measured latency range (no extrapolation). "
           "In brackets: BLEU difference to wait-k, its paired bootstrap "
           f"{int(CI_LEVEL * 100)}% interval, its p-value after Holm's correction over every test of the table "
           f"(p_holm) and the verdict at family-wise level {1 - CI_LEVEL:.2f}. "
           + ("With seeds: the difference is the mean over seeds of each seed's difference at its own wait-k "
              "latency, and every resample draws the same sentences in every seed. " if seeds else "")
           + f"⚑: a length ratio |Y|/|Y*| outside [{lo}, {hi}] "
           "(for a policy cell: at one of the two points interpolated); †: likely degenerate (OmniSTEval, |DSPTV| > "
           f"{DEGENERATE_DSPTV:g}). A comparison with ⚑ or † (wait-k's point or a policy's) never counts as a win.", ""]
    return "\n".join(md)


def render_coverage_markdown(res: Mapping[str, Any]) -> str:
    """The tuning report (``mmst-policy-results --coverage-only``): per model, how far each sweep reaches over
    wait-k's LAAL range for k=1..5 on the tune split, and every point of every sweep (BLEU, latencies, length
    ratio with its flags), the numbers the grids and the length cap are chosen on."""
    seeds = res.get("seeds")
    md = [f"# Tuning report: policy sweeps on {res['split']}", "",
          f"Command: `{res['provenance']['command']}`  ",
          f"Date: {res['provenance']['date']}, commit `{res['provenance']['git_commit']}`.  ",
          f"Split: {res['split']}, first {res['n_utterances']} utterances; joint decoding of {', '.join(res['langs'])}"
          + (f"; training seed {', '.join(str(x) for x in seeds)}" if seeds else "") + ".", "",
          f"The grids (`--<policy>-args`) and the length cap (`--max-len-a`, `--max-len-b`) are chosen on this split: "
          f"a sweep should reach both ends of wait-k's LAAL range for k=1..5 without a flagged (⚑, length ratio "
          f"outside [{LENGTH_RATIO_RANGE[0]}, {LENGTH_RATIO_RANGE[1]}]) or likely degenerate (†) point. The test "
          "split(s) are swept with the same grids and never looked at for this choice.", ""]
    short = res["summary"]["sweeps_short_of_waitk_laal_range"]
    md += [f"{short['short']} of {short['of']} sweeps (model x policy x language) miss an end of wait-k's LAAL range.", ""]
    for model, cov in res["coverage"].items():
        md += [f"## {model} model", "", "### Reach of each sweep over wait-k's LAAL range (k=1..5)", ""]
        md += coverage_markdown(cov, res["sweeps"][model])
        md += ["### Sweeps", ""] + _sweeps_table(res["sweeps"][model], res["langs"]) + [""]
    return "\n".join(md)
