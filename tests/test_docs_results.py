"""Every results table in README.md and docs/ equals its rendering from the committed JSON in docs/results/
(``tools/render_docs.py --check``), and every results JSON says where it came from."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "bench"))

import provenance  # noqa: E402
import render_docs  # noqa: E402
import summarize  # noqa: E402

RESULTS = REPO / "docs" / "results"


def test_docs_tables_match_their_json():
    stale = render_docs.run(check=True)
    assert not stale, f"out of date with docs/results (run python tools/render_docs.py): {stale}"


def test_every_marker_names_a_known_table_and_every_table_is_used():
    used = set()
    for p in render_docs.doc_files():
        for m in render_docs.MARKER.finditer(p.read_text()):
            if m.group(1) == "results":
                assert m.group(2) in render_docs.TABLES, f"{p}: unknown table {m.group(2)}"
                used.add(m.group(2))
    # a table whose JSON is committed must be shown somewhere (the quickstart's appears once collected)
    have = {n for n, t in render_docs.TABLES.items() if (RESULTS / t.json).exists()}
    assert have <= used, f"tables rendered nowhere: {have - used}"


def test_check_detects_a_table_edited_by_hand(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n\n<!-- results:features -->\n<!-- /results:features -->\n\nmore\n")
    assert render_docs.run(check=False, files=[doc]) == [doc]  # rendered once
    good = doc.read_text()
    assert "| fbank | 1 |" in good and "Source: `docs/results/features.json`" in good
    assert render_docs.run(check=True, files=[doc]) == []
    # one measured number changed by hand: the check must notice it
    row = next(line for line in good.splitlines() if line.startswith("| fbank | 1 |"))
    cells = row.split(" | ")
    cells[2] = str(int(cells[2]) + 1)
    doc.write_text(good.replace(row, " | ".join(cells)))
    assert render_docs.run(check=True, files=[doc]) == [doc]


def test_bad_markers_name_file_and_line(tmp_path):
    doc = tmp_path / "bad.md"
    doc.write_text("a\nb\n<!-- results:features -->\nno end marker\n")
    with pytest.raises(render_docs.RenderError, match=r"bad.md:3: .*no closing"):
        render_docs.run(check=True, files=[doc])
    doc.write_text("a\n<!-- results:no-such-table -->\n<!-- /results:no-such-table -->\n")
    with pytest.raises(render_docs.RenderError, match=r"bad.md:2: unknown results table 'no-such-table'"):
        render_docs.run(check=True, files=[doc])


def test_config_key_reference_lists_every_key():
    from mmst.training.config import iter_config_docs

    text = render_docs.config_keys()
    keys = [k for k, *_ in iter_config_docs()]
    assert len(keys) > 30
    for k in keys:
        assert f"| `{k}` |" in text, k
    training = (REPO / "docs" / "training.md").read_text()
    assert "| `optim.implementation` |" in training  # the generated block is in the training docs


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_results_json_records_command_date_commit_machine(path):
    rec = json.loads(path.read_text()).get("provenance")
    assert rec, f"{path.name}: no provenance record (bench/provenance.py)"
    assert rec["command"] and rec["date"][:4].isdigit() and rec["git_commit"]
    m = rec["machine"]
    assert m["cpu_model"] and m["cores"] >= 1 and m["torch"]


def test_run_record_describes_this_machine():
    rec = provenance.run_record("python bench/x.py --y 1")
    assert rec["command"] == "python bench/x.py --y 1"
    assert rec["machine"]["cores"] >= 1 and rec["machine"]["torch"].startswith("2.")
    assert rec["git_commit"] is None or len(rec["git_commit"].split("-")[0]) == 40


def test_stamp_adds_provenance(tmp_path):
    p = tmp_path / "scores.json"
    p.write_text(json.dumps({"BLEU": 1.5}))
    provenance.stamp(p, "make demo", date="2026-01-02T03:04:05+00:00")
    d = json.loads(p.read_text())
    assert d["BLEU"] == 1.5 and d["provenance"]["command"] == "make demo"
    assert d["provenance"]["date"] == "2026-01-02T03:04:05+00:00"
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        provenance.stamp(p, "x")


def test_bench_summary_reads_docs_results():
    rows = summarize.rows(RESULTS)
    benches = {r[0] for r in rows}
    assert {"features", "alignment", "streaming", "train", "stragglers", "vs_fairseq"} <= benches
    feat = next(r for r in rows if r[0] == "features")
    single = next(x for x in json.loads((RESULTS / "features.json").read_text())["results"]
                  if x["task"] == "fbank" and x["jobs"] == 1)
    assert feat[2] == f"{single['x_realtime_per_cpu_second']:.0f}"


def test_quickstart_collection_and_tables(tmp_path):
    """tools/collect_quickstart.py reads what recipes/synthetic/run.sh writes (a k sweep, one k on
    tst-unseen, stage markers); the README's quickstart tables render from it."""
    sys.path.insert(0, str(REPO / "tools"))
    import collect_quickstart

    langs = ["de", "ja"]

    def scores(bleu):
        return {"BLEU": bleu, "chrF": bleu - 2, "AL": 1000.0 + bleu, "LAAL": 1001.5, "YAAL": 990.0, "AL_CA": 1020.25,
                "AP": 0.7}

    (tmp_path / "eval").mkdir()
    (tmp_path / "eval_unseen").mkdir()
    (tmp_path / ".done").mkdir()
    sweep = {"sweep": {f"k{k}": {"per_lang": {lang: scores(90 + k + i) for i, lang in enumerate(langs)},
                                 "average": scores(91 + k), "rtf": 0.1} for k in (1, 3)}, "ks": [1, 3], "langs": langs}
    (tmp_path / "eval" / "scores.json").write_text(json.dumps(sweep))
    (tmp_path / "eval_unseen" / "scores.json").write_text(json.dumps(
        {"per_lang": {lang: {**scores(80.0), "info": {}} for lang in langs}, "average": scores(80.0),
         "config": {"waitk": 3}}))
    (tmp_path / ".done" / "stage2").write_text("460\n")
    d = collect_quickstart.collect(tmp_path, "make demo")
    assert d["provenance"]["command"] == "make demo" and d["stage_seconds"] == {"2": 460}
    tab = render_docs.quickstart_sweep(d["tst-COMMON"]).splitlines()
    assert tab[0] == "| lang | k | BLEU | chrF | AL | LAAL | YAAL | AL_CA |"
    assert "| ja | 3 | 94.00 | 92.00 | 1094.00 | 1001.50 | 990.00 | 1020.25 |" in tab
    assert tab[-1] == "| avg | 3 | 94.00 | 92.00 | 1094.00 | 1001.50 | 990.00 | 1020.25 |"
    unseen = render_docs.quickstart_single(d["tst-unseen"])
    assert unseen.startswith("wait-3:") and "| avg | 80.00 | 78.00 | 1080.00 |" in unseen
    assert "| 2 | train the xs unified model (multi-k wait-k) | 460 |" in render_docs.quickstart_stages(d)
    assert "setup" not in render_docs.quickstart_stages(d) and "did not record" in render_docs.quickstart_total(d)
    # make demo writes the seconds of setup and of the whole command beside the stage markers
    (tmp_path / ".done" / "setup").write_text("95\n")
    (tmp_path / ".done" / "total").write_text("690\n")
    d = collect_quickstart.collect(tmp_path, "make demo")
    assert (d["setup_seconds"], d["total_seconds"]) == (95, 690)
    stages = render_docs.quickstart_stages(d).splitlines()
    assert stages[2] == "| setup | make setup and the system packages | 95 |"
    assert stages[-1] == "| total | the whole `make demo`, setup included | 690 |"
    assert render_docs.quickstart_total(d).startswith("`make demo` took 11.5 minutes wall on ")
    assert "(budget 12 minutes: met)" in render_docs.quickstart_total(d)
    assert "missed" in render_docs.quickstart_total({**d, "total_seconds": 721})
    assert "training was 460 s of it" in render_docs.quickstart_total(d)
    (tmp_path / "eval" / "scores.json").write_text(json.dumps({"per_lang": {}}))
    with pytest.raises(SystemExit, match="not a k sweep"):
        collect_quickstart.collect(tmp_path, "make demo")


def test_source_line_keeps_a_dirty_commit_visible():
    rec = {"command": "python bench/x.py", "date": "2026-12-01T00:00:00+00:00", "machine": {}}
    dirty = render_docs.source_line("x.json", {"provenance": {**rec, "git_commit": "0123456789abcdef" * 2 + "01234567-dirty"}})
    clean = render_docs.source_line("x.json", {"provenance": {**rec, "git_commit": "0123456789abcdef" * 2 + "01234567"}})
    assert "at commit `0123456789-dirty`" in dirty and "at commit `0123456789`;" not in dirty
    assert "at commit `0123456789`" in clean and "dirty" not in clean


def _longform_json(new: bool) -> dict:
    """A hand-made ``bench/bench_longform.py`` result: two 5-minute buckets; ``new`` adds the fields written
    since the AlignAtt/capped rows, the one-push memory check and the capped cross-check exist."""
    bucket = {"n_chunks": 10, "ms_per_chunk_wall": {"mean": 40.0, "p90": 60.0},
              "ms_per_chunk_cpu": {"mean": 30.0, "p90": 35.0}, "peak_rss_mib": 400.0, "vad_segments": 3,
              "words": 9, "max_state_numel": 1000}
    d = {"summary": {"cost_ratio_60min_vs_5min": 1.2, "rss_growth_mib_10_to_60min": 50.5, "rtf": 1.0},
         "config": {"split": "tst-COMMON", "tgt_langs": ["de", "ja"], "policy": "waitk:k=3", "minutes": 10.0,
                    "pause_ms": "300,800", "chunk_ms": 320.0, "threads": 1, "params": 2_000_000,
                    "vad_min_silence_ms": 150.0},
         "cost": {"buckets": [{**bucket, "from_min": 0.0, "to_min": 5.0}, {**bucket, "from_min": 5.0, "to_min": 10.0}],
                  "rtf": 1.0, "n_segments": 6, "n_words": 18, "cost_ratio_wall": 1.5},
         "crosscheck": {"n_utterances": 4, "audio_s": 12.0, "vad_segments": 4, "oracle_segments": 4,
                        "per_lang": {lang: {"segmented": {"BLEU": 50.0, "LAAL": 1000.0},
                                            "vad": {"BLEU": 49.0, "StreamLAAL": 900.0},
                                            "oracle": {"BLEU": 50.0, "StreamLAAL": 1100.0}} for lang in ("de", "ja")}}}
    if new:
        d["summary"].update(vad_share_of_compute=0.1234, rss_growth_mib_one_push_5min=31.0)
        d["config"].update(rss_minutes=5.0, row_minutes=2.0)
        d["cost"].update(rtf_cpu=0.25, n_forced_cuts=2, vad_share_of_compute=0.1234)
        row = {"minutes": 2.0, "rtf": 0.5, "rtf_cpu": 0.375, "n_words": 5, "cost_ratio_cpu": 1.0,
               "rss_growth_mib_10_to_end": 0.0}
        d["rows"] = [{**row, "name": "alignatt", "policy": "alignatt:frames=4", "pause_ms": "300,800",
                      "max_segment_s": 20.0, "n_segments": 3, "n_forced_cuts": 0, "vad_share_of_compute": 0.2},
                     {**row, "name": "capped", "policy": "waitk:k=3", "pause_ms": "100,100", "max_segment_s": 10.0,
                      "n_segments": 12, "n_forced_cuts": 11, "vad_share_of_compute": 0.0456}]
        d["memory_one_push"] = {"minutes": 5.0, "rss_growth_mib_one_push": 40.0, "rss_growth_mib_chunk_pushes": 9.0,
                                "one_push_minus_chunk_pushes_mib": 31.0}
        d["crosscheck"]["vad_forced_cuts"] = 0
        d["crosscheck_capped"] = {
            "n_utterances": 4, "audio_s": 10.4, "pause_ms": "100,100", "max_segment_s": 10.0, "vad_segments": 2,
            "vad_forced_cuts": 1, "oracle_segments": 4,
            "per_lang": {"de": {"vad": {"BLEU": 31.25, "StreamLAAL": 2400.4}, "oracle": {"BLEU": 50.0, "StreamLAAL": 1100.0}},
                         "ja": {"vad": {"BLEU": None, "StreamLAAL": None, "error": "every hypothesis is empty"},
                                "oracle": {"BLEU": 40.0, "StreamLAAL": 1000.0}}}}
    return d


def test_longform_tables_render_rows_memory_capped_crosscheck_and_goals():
    new = _longform_json(new=True)
    cost = render_docs.longform_cost(new)
    lines = cost.splitlines()
    assert lines[0] == "| measure | value | goal | met |"
    # goals: 1.2 <= 1.2 is met, 50.5 MiB > 50 missed, RTF 1.0 is not < 1, one push 31 MiB > 30 missed
    assert "| CPU ms per chunk, last bucket / first bucket | 1.20 | <= 1.2 | met |" in lines
    assert "| peak RSS growth from 10 min to the end (MiB) | 50.5 | <= 50 | missed |" in lines
    assert "| peak RSS growth, one push of a 5-min talk minus 320 ms pushes (MiB) | 31.0 | <= 30 | missed |" in lines
    assert "| real-time factor (wall compute / audio) | 1.000 | < 1 | missed |" in lines
    assert "| real-time factor (thread CPU time / audio) | 0.250 |  |  |" in lines
    assert "| VAD share of the long-form compute | 12.3% |  |  |" in lines
    assert "| 5-10 | 30.0 | 40.0 | 60.0 | 400 | 3 | 1000 |" in lines
    assert "6 VAD segments (2 cut by the segment cap), 18 words." in cost

    rows = render_docs.longform_rows(new).splitlines()
    assert "| main run | waitk:k=3 | 10 | 300-800 | 1.000 | 0.250 | 6 | 2 | 12.3% |" in rows
    assert "| AlignAtt | alignatt:frames=4 | 2 | 300-800 | 0.500 | 0.375 | 3 | 0 | 20.0% |" in rows
    assert "| capped segments | waitk:k=3 | 2 | 100 | 0.500 | 0.375 | 12 | 11 | 4.6% |" in rows
    assert any("only at the 10 s cap" in line for line in rows)
    assert ("One push of a whole 5-minute talk: peak RSS growth 40.0 MiB, against 9.0 MiB in 320 ms pushes: "
            "31.0 MiB more (goal <= 30 MiB: missed).") in rows

    x = render_docs.longform_crosscheck(new)
    assert "4 utterances (12 s as one talk); 4 VAD segments, 4 oracle segments." in x  # no cut: not mentioned
    assert "| de | 31.25 | 50.00 | 2400 | 1100 |" in x.splitlines()
    assert "| ja | - | 40.00 | - | 1000 |" in x.splitlines()  # scoring failed: recorded as missing, not 0
    assert "4 utterances (10 s as one talk, pauses 100,100 ms); 2 VAD segments (1 cut by the 10 s cap)" in x

    # an older JSON (none of those fields) renders as before: no met column, no rows, one cross-check table
    old = _longform_json(new=False)
    cost = render_docs.longform_cost(old)
    assert cost.splitlines()[0] == "| measure | value | goal |"
    assert "| real-time factor (wall compute / audio) | 1.000 | < 1 |" in cost.splitlines()
    assert "one push" not in cost and "VAD share" not in cost and "cut by" not in cost
    assert cost.endswith("6 VAD segments, 18 words.")
    assert render_docs.longform_rows(old).startswith("This run recorded neither")
    x = render_docs.longform_crosscheck(old)
    assert x.count("| lang |") == 1 and x.endswith("4 VAD segments, 4 oracle segments.")


def test_longform_iwslt_table_leads_with_longyaal_and_states_the_omnisteval_check():
    """The cross-check runs scored both ways: LongYAAL first, StreamLAAL and BLEU after mWER beside it; the
    ``omnisteval`` command's largest differences and the goal under the table (missed when a run differs);
    a result without OmniSTEval scores says so."""
    d = _longform_json(new=True)
    soft = {"LongYAAL": 1151.4, "LongYAAL_CA": 1201.0, "SoftSeg_BLEU": 48.5, "SoftSeg_chrF": 60.25}
    d["crosscheck"]["per_lang"]["de"]["vad"].update(soft)
    d["crosscheck"]["per_lang"]["ja"]["oracle"].update(soft, SoftSeg_BLEU=40.0)
    d["summary"]["omnisteval_cli"] = {
        "goal": "every metric's |adapter - omnisteval command| <= 1e-06", "met": False, "runs": 7,
        "max_abs_diff": {"SoftSeg_BLEU": 0.0, "LongYAAL": 2.5e-06}, "tsv_max_abs_diff": {"LongYAAL": 4.9e-05},
        "failed": ["crosscheck vad de"], "not_scored": ["crosscheck_capped vad ja"], "langs": ["de", "ja"]}
    lines = render_docs.longform_iwslt(d).splitlines()
    assert lines[0] == ("| talk | segmentation | lang | LongYAAL (ms) | LongYAAL_CA (ms) | BLEU (SoftSegmenter) | "
                        "chrF (SoftSegmenter) | StreamLAAL (ms, mWER) | BLEU (mWER) |")
    assert "| 300-800 ms pauses | VAD | de | 1151 | 1201 | 48.50 | 60.25 | 900 | 49.00 |" in lines
    assert "| 300-800 ms pauses | oracle | ja | 1151 | 1201 | 40.00 | 60.25 | 1100 | 50.00 |" in lines
    assert "| 100 ms pauses, VAD cut at 10 s | VAD | ja | - | - | - | - | - | - |" in lines
    assert len(lines) == 2 + 8 + 2
    assert lines[-1] == (
        "The `omnisteval` command on the same files (7 runs: talk x segmentation x language, de, ja; ja at character "
        "level), largest difference from the adapter: LongYAAL 2.5e-06, SoftSeg_BLEU 0.0e+00 (goal: every metric's "
        "|adapter - omnisteval command| <= 1e-06: missed); against the 4 decimals of its `scores.tsv`: at most "
        "4.9e-05. Not equal: crosscheck vad de. Not scored by OmniSTEval: crosscheck_capped vad ja.")
    assert render_docs.longform_iwslt(_longform_json(new=True)).startswith("This run recorded no OmniSTEval scores")


def test_vs_fairseq_summary_table_renders_goals_and_both_dev_losses():
    s = {"ratio_fp32_median": 1.31, "ratio_compiled_median": 1.31, "ratio_bf16_median": 1.9, "compiled_measured": False,
         "mfu_s_1t": 0.49, "mfu_s_2t": 0.371, "speedup_2t_over_1t_s": 1.5,
         "dev_loss_equal_updates": {"updates": 30, "ours_fp32": 2.713, "fairseq": 2.602},
         "dev_loss_equal_time": {"cpu_seconds": 38.2, "ours_fp32": 2.512, "ours_fp32_updates": 39, "fairseq": 2.602,
                                 "fairseq_updates": 30},
         "goals": {"ratio": ">= 1.5", "mfu_s_2t": ">= 0.5"}, "met": {"ratio": False, "mfu_s_2t": False}}
    train_s = [{"threads": t, "size": "s", "arch": "unified", "langs": 4, "batch_frames": 7200, "s_per_update": v}
               for t, v in ((1, 3.0), (2, 2.0))]
    lines = render_docs.vs_fairseq_summary({"summary": s, "train_s": train_s}).splitlines()
    assert "| throughput ratio ours fp32 / fairseq, median | 1.31 | >= 1.5 | missed |" in lines
    assert ("| throughput ratio ours compiled / fairseq, median (same as fp32: `compile` is off by default) "
            "| 1.31 | >= 1.5 |  |") in lines
    assert "| MFU of `s`, 2 threads | 37.1% | >= 50% | missed |" in lines
    assert "| speed-up of `s`, 2 threads over 1 | 1.50 |  |  |" in lines
    assert "| after 30 updates (median of the pairs) | 2.713 | 2.602 |" in lines
    assert "| at equal training time (38 CPU s) | 2.512 (39 updates) | 2.602 (30 updates) |" in lines
    assert lines[-1].endswith("1 thread(s) 3.00 s/update, 2 thread(s) 2.00 s/update.")


def test_train_profile_tables_per_update_and_scaling():
    def row(threads, total_ms, shares, s_per_update):
        return {"size": "s", "threads": threads, "precision": "fp32", "s_per_update": s_per_update, "mfu": 0.4,
                "profile": {"updates": 2, "total_ms": total_ms, "shares": shares,
                            "top_ops": [{"name": "aten::mm", "self_ms": total_ms / 2, "calls": 200, "category": "matmul"}]}}

    one = dict(matmul=0.6, elementwise=0.3, loss=0.05, optimizer=0.05, data=0.0)
    two = dict(matmul=0.5, elementwise=0.4, loss=0.05, optimizer=0.05, data=0.0)
    d = {"results": [row(1, 6000.0, one, 2.9), row(2, 4000.0, two, 1.9)],
         "meta": {"frames_per_batch": 8000, "loadavg_1min": 1.04, "cpu_count": 2}}
    for r in d["results"]:
        r["profile"]["data_source"] = "synthetic"
    prof = render_docs.train_profile(d).splitlines()
    assert prof[-1] == ("2 profiled updates per row (CPU self time of each op; data: synthetic); 8000 frames per batch; "
                        "load average 1.0 on 2 CPUs when the run ended.")
    assert "| s | 1 | fp32 | 2.90 | 40.0% | 3000 | 60.0% | 30.0% | 5.0% | 5.0% | 0.0% |" in prof
    ops = render_docs.train_profile_ops(d)
    assert "| `aten::mm` | 1500.0 | 50.0% | matmul | 100 |" in ops.splitlines() and "`s`, 2 thread(s):" in ops
    assert "| `aten::mm` | 1000.0 | 50.0% | matmul | 100 | 1.50 |" in ops.splitlines()  # 2 threads vs 1
    sc = render_docs.train_profile_scaling(d).splitlines()
    # matmul 1800 -> 1000 ms/update (1.80x), elementwise 900 -> 800 (1.12x), total 3000 -> 2000 (1.50x)
    assert "| s | matmul | 1800 | 1000 | 1.80 |" in sc
    assert "| s | elementwise | 900 | 800 | 1.12 |" in sc
    assert "| s | total | 3000 | 2000 | 1.50 |" in sc and not any("outside ops" in x for x in sc)
    d["results"][0]["profile"]["wall_ms"] = 6400.0  # 200 ms/update outside ops at 1 thread, 300 at 2
    d["results"][1]["profile"]["wall_ms"] = 4600.0
    sc = render_docs.train_profile_scaling(d).splitlines()
    assert sc[-3:] == ["| s | outside ops (Python, autograd, profiler) | 200 | 300 | 0.67 |",
                       "| s | total | 3000 | 2000 | 1.50 |", "| s | wall (profiled) | 3200 | 2300 | 1.39 |"]


def test_vs_fairseq_seeds_table():
    d = {"config": {"updates": 20, "max_tokens": 3000, "dropout_match": "ours"},
         "rows": [{"seed": 1, "ours_fp32": 2.80, "fairseq": 2.79}, {"seed": 2, "ours_fp32": 2.71, "fairseq": 2.74}],
         "summary": {"ours_fp32": {"mean": 2.755}, "fairseq": {"mean": 2.765}, "ours_minus_fairseq": {"mean": -0.01},
                     "spread_over_seeds": 0.09}}
    lines = render_docs.vs_fairseq_seeds(d).splitlines()
    assert lines[2:5] == ["| 1 | 2.800 | 2.790 | +0.010 |", "| 2 | 2.710 | 2.740 | -0.030 |",
                          "| mean | 2.755 | 2.765 | -0.010 |"]
    assert lines[-1].endswith("Largest range of one toolkit over the seeds: 0.090.")


def test_train_compile_table_speedup_over_eager_of_the_same_row_key():
    """Each compiled row's speed-up is the eager row's s/update (same size, threads, precision) over its own."""
    row = {"size": "s", "threads": 1, "precision": "fp32", "frames_per_s": 1.0, "padding_pct": 10.0, "mfu": 0.5}
    d = {"meta": {"frames_per_batch": 2000, "utt_frames": 300, "data": None},
         "results": [{**row, "compile": "false", "compile_in_effect": "false", "compile_graphs": 0, "s_per_update": 2.0},
                     {**row, "compile": "blocks", "compile_in_effect": "blocks", "compile_graphs": 6, "s_per_update": 4.0},
                     {**row, "threads": 2, "compile": "blocks", "compile_graphs": 6, "s_per_update": 1.0}]}
    lines = render_docs.train_compile(d).splitlines()
    assert lines[2].endswith("| 2.00 | 1 | 10.0 | 50.0% | 1.00x |")
    assert lines[3].endswith("| 4.00 | 1 | 10.0 | 50.0% | 0.50x |")
    assert lines[4].endswith("| 1.00 | 1 | 10.0 | 50.0% | - |")  # no eager row at 2 threads
    assert "synthetic batches of ~2000 frames" in render_docs.train_compile(d)
