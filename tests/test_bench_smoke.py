"""Smoke runs of the benchmarks' fastest modes; marked slow (about 30 s in total)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def _run(args: list[str]) -> str:
    r = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.slow
def test_bench_train_quick(tmp_path):
    """Slow: the training benchmark at its quick size, with the profiler, in a subprocess."""
    out = tmp_path / "train.json"
    stdout = _run(["bench/bench_train.py", "--quick", "--profile", "--out", str(out)])
    # the record names the model's files, which only the worker process (bench_train.py --worker) imports
    assert "mmst/models/encoder.py" in json.loads(out.read_text())["provenance"]["depends_on"]["paths"]
    res = json.loads(out.read_text())["results"][0]
    prof = res["profile"]  # --profile: 3 more updates under torch.profiler
    assert set(prof["shares"]) == {"matmul", "elementwise", "loss", "optimizer", "data"}
    assert sum(prof["shares"].values()) == pytest.approx(1.0)
    assert all(prof["shares"][k] > 0 for k in prof["shares"])
    by_op = {(op["name"], op["category"]) for op in prof["top_ops"]}
    assert ("aten::mm", "matmul") in by_op and "shares: matmul" in stdout
    assert res["frames_per_s"] > 0 and 0 < res["mfu"] <= 1.0 and res["model_gflop_per_update"] > 0
    # augmentation row: SpecAugment LB and on-the-fly speed perturbation cost per batch
    assert res["specaugment"] == "LB" and res["specaugment_s_per_batch"] > 0 and res["speed_onthefly_s_per_batch"] > 0
    assert res["specaugment_pct"] == pytest.approx(
        100 * res["specaugment_s_per_batch"] / res["s_per_update"], rel=0.5)


@pytest.mark.slow
def test_bench_streaming_quick(tmp_path):
    out = tmp_path / "streaming.json"
    _run(["bench/bench_streaming.py", "--quick", "--out", str(out)])
    res = json.loads(out.read_text())
    assert set(res["rtf_by_num_langs"]) == {"1", "4", "8"}
    for name in ("incremental", "incremental_cat", "incremental_left", "reencode"):
        assert res["growth"][name]["cpu"]["buckets"]


@pytest.mark.slow
def test_vs_fairseq_inputs_and_summary(tmp_path):
    import bench_vs_fairseq as vs
    import summarize

    data = vs.make_data(tmp_path, 20)
    info = vs.write_fairseq_inputs(data, tmp_path / "fs", "de")
    assert info["utterances"]["train"] == 20
    head = (tmp_path / "fs" / "train_st.tsv").read_text().splitlines()
    assert head[0].split("\t") == ["id", "audio", "n_frames", "tgt_text", "speaker"]
    assert Path(head[1].split("\t")[1]).suffix == ".npy"
    n_dict = len((tmp_path / "fs" / "spm_joint.txt").read_text().splitlines())
    assert n_dict + 4 == info["vocab"]
    assert vs.fairseq_available() == (importlib.util.find_spec("fairseq") is not None)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "vs_fairseq.json").write_text(json.dumps({"skipped": "x"}))
    assert summarize.rows(tmp_path / "res")[0][0] == "vs_fairseq"


@pytest.mark.slow
def test_vs_fairseq_our_side_and_precision_summary(tmp_path):
    """Our side of bench_vs_fairseq runs in both precisions (no fairseq needed); the summary has one
    ratio row per precision.

    Slow: it trains the 27M-parameter s2t_transformer_s in fp32 and bf16 (emulated on CPUs without native
    bf16), in subprocesses."""
    import bench_vs_fairseq as vs
    import summarize

    data = vs.make_data(tmp_path, 20)
    # max_tokens 400: batches of one or two utterances; bf16 (emulated where the CPU has no native bf16) costs
    # a quarter of what batches of 1500 frames cost, and the property is the same
    args = argparse.Namespace(lang="de", max_tokens=400, updates=2, lr=2e-3, seed=1, dropout_match="ours",
                                                     warmup_updates=2, threads=1, omp_wait_policy="PASSIVE",
                                                     optimizer="fused")
    res = {p: vs.run_ours(data, args, p) for p in ("fp32", "bf16")}
    for r in res.values():
        assert r["updates"] == 2 and len(r["walls"]) == 2 and r["params"] == 26992640  # s2t_transformer_s size, vocab 64
        assert 0 < r["dev_loss"] < 10
    assert res["fp32"]["dev_loss"] != res["bf16"]["dev_loss"]  # bf16 really ran
    (tmp_path / "res").mkdir()
    by = {p: {"ratio_min": 1.1, "ratio_median": 1.2 + i, "ratio_max": 1.3 + i,
              "equal_wall": {"ours_dev_loss": 2.5, "fairseq_dev_loss": 2.6}} for i, p in enumerate(("fp32", "bf16"))}
    (tmp_path / "res" / "vs_fairseq.json").write_text(json.dumps({"by_precision": by}))
    rows = [r for r in summarize.rows(tmp_path / "res") if r[0] == "vs_fairseq"]
    assert [r[1] for r in rows if "throughput" in r[1]] == [
        "throughput ours (fp32) / fairseq (fp32) min / median / max",
        "throughput ours (bf16) / fairseq (fp32) min / median / max"]
    assert rows[2][2] == "1.10 / 2.20 / 2.30"
    (tmp_path / "res" / "vs_fairseq.json").write_text(json.dumps(
        {"by_precision": by, "summary": {"mfu_s_1t": 0.5, "mfu_s_2t": 0.375, "speedup_2t_over_1t_s": 1.5}}))
    rows = [r for r in summarize.rows(tmp_path / "res") if r[0] == "vs_fairseq"]
    assert rows[-1][1:] == ("MFU of s at 1 / 2 threads, speed-up 2 threads / 1", "50.0% / 37.5%, 1.50",
                            "MFU at 2 threads >= 50%")


@pytest.mark.slow
def test_bench_stragglers_mmst_quick(tmp_path, tiny_feature_data):
    # W = 2 with one 2x slow rank, 1 seed: every summary key, the predictions and the dense time to target.
    # --launcher direct: the ranks start without torchrun's agent (3 interpreter starts fewer; mmst-train under
    # torchrun: tests/test_distributed_trainer.py); the torchrun command line is checked below
    """Slow: runs of DDP, DropCompute and the parameter server (W = 2) on the tiny model, one after another, each
    rank a fresh interpreter."""
    import bench_stragglers_mmst as bsm

    [(cmd, env)] = bsm.launch_commands("torchrun", 3, ["--data", "D"])
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node", "3"] and env == {}
    assert cmd[-4:] == ["-m", "mmst.training.cli", "--data", "D"] and "--rdzv-endpoint" in cmd
    direct = bsm.launch_commands("direct", 3, ["--data", "D"])
    assert [c for c, _ in direct] == [[sys.executable, "-m", "mmst.training.cli", "--data", "D"]] * 3
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) for _, e in direct] == [(str(r), "3", str(r)) for r in range(3)]
    assert len({e["MASTER_PORT"] for _, e in direct}) == 1
    out, png = tmp_path / "stragglers_mmst.json", tmp_path / "stragglers_mmst.png"
    stdout = _run(["bench/bench_stragglers_mmst.py", "--quick", "--launcher", "direct", "--data", str(tiny_feature_data),
                   "--out", str(out), "--plot", str(png)])
    res = json.loads(out.read_text())
    assert list(res)[0] == "summary" and set(res["summary"]) == {
        "dropcompute_over_ddp_samples_per_s", "dropcompute_drop_rate", "dropcompute_over_ddp_time_to_target",
        "param_server_over_ddp_slow_rank", "dropcompute_over_ddp_samples_per_s_slow_w2",
        "dropcompute_over_ddp_time_to_target_slow_w2", "dropcompute_drop_rate_slow_w2",
        "prediction_error_samples_per_s_max", "param_server_over_ddp_samples_per_s_slow_w2", "curve_seeds",
        "x_ddp_samples_per_s_ci_w2"}
    assert res["summary"]["x_ddp_samples_per_s_ci_w2"] == {}  # one seed: no interval
    rows = {r["mode"]: r for r in res["aggregate"]}
    assert set(rows) == {"ddp", "dropcompute", "param-server"} and all(not r["errors"] for r in rows.values())
    assert all(r["samples_per_s"] > 0 and r["seeds"] == 1 and r["scenario"] == "slow" for r in rows.values())
    assert rows["ddp"]["x_ddp_samples_per_s"] == 1.0 and 0 <= rows["dropcompute"]["drop_rate"] <= 1
    assert 0 < rows["dropcompute"]["delay_share"] < 1  # the slow rank's extra time is part of its step, not all
    assert rows["param-server"]["staleness_max"] >= 0 and res["targets"]["2"] > 0
    assert rows["param-server"]["oversubscribed"] == (3 > res["config"]["cores"])
    s = res["summary"]
    assert s["dropcompute_over_ddp_samples_per_s_slow_w2"] == pytest.approx(rows["dropcompute"]["x_ddp_samples_per_s"])
    assert s["dropcompute_drop_rate_slow_w2"] == pytest.approx(rows["dropcompute"]["drop_rate"])
    assert s["param_server_over_ddp_samples_per_s_slow_w2"] == pytest.approx(rows["param-server"]["x_ddp_samples_per_s"])
    assert s["curve_seeds"] == 1 and res["goals"]["curve_seeds"] == "missed"
    # predictions beside measurements: DropCompute's tau_info predicts its own and DDP's samples/s
    for mode in ("ddp", "dropcompute"):
        r = rows[mode]
        assert r["pred_samples_per_s"] > 0
        assert r["pred_error_samples_per_s"] == pytest.approx(abs(r["pred_samples_per_s"] / r["samples_per_s"] - 1))
    assert s["prediction_error_samples_per_s_max"] == pytest.approx(
        max(rows[m]["pred_error_samples_per_s"] for m in ("ddp", "dropcompute")))
    assert 0 <= rows["dropcompute"]["pred_drop_rate"] <= 1
    # DDP's own loss at its own time to target is the target (an interpolated crossing), or below it when the
    # first validation was already below
    ddp_curve = next(r["curve"] for r in res["rows"] if r["mode"] == "ddp")
    if rows["ddp"]["time_to_target_s"] is not None:
        at, target = rows["ddp"]["dev_loss_at_ddp_time_to_target"], res["targets"]["2"]
        assert at == pytest.approx(target) if ddp_curve[0][1] > target else at <= target
    assert "| W | scenario | mode |" in stdout and out.with_suffix(".md").is_file() and png.stat().st_size > 1000


@pytest.mark.slow
def test_bench_int8_quick(tmp_path, tiny_system):
    out = tmp_path / "int8.json"
    stdout = _run(["bench/bench_int8.py", "--quick", "--model", str(tiny_system["ckpt"]),
                   "--data", str(tiny_system["data"]), "--tgt-langs", "de", "--out", str(out)])
    res = json.loads(out.read_text())
    rows = res["rows"]
    lin = res["linear"]
    assert lin["calls"] == sum(x["calls"] for x in lin["shapes"]) > 0
    assert lin["fp32_linear_s"] == pytest.approx(sum(x["calls"] * x["fp32_us"] for x in lin["shapes"]) / 1e6)
    assert lin["linear_share"] == pytest.approx(lin["fp32_linear_s"] / lin["fp32_compute_s"])
    assert lin["int8_rtf_bound_free_linear"] == pytest.approx(1.0 - lin["linear_share"])
    assert lin["int8_over_fp32_rtf_predicted"] == pytest.approx(
        1.0 - lin["linear_share"] + lin["int8_linear_s"] / lin["fp32_compute_s"])
    assert lin["fp32_compute_s"] == pytest.approx(rows["fp32"]["rtf"] * res["config"]["audio_s"])
    import torch

    from mmst.evaluation.loading import load_system

    model = load_system(str(tiny_system["ckpt"]), data_dir=str(tiny_system["data"]), tgt_langs=["de"]).model
    layer_shapes = {(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    assert {(x["in_features"], x["out_features"]) for x in lin["shapes"]} <= layer_shapes
    assert all(x["int8_over_fp32"] == pytest.approx(x["int8_us"] / x["fp32_us"]) for x in lin["shapes"])
    assert len({(x["rows"], x["in_features"], x["out_features"]) for x in lin["shapes"]}) == len(lin["shapes"])
    assert set(res["summary"]) == {"int8_over_fp32_rtf", "int8_bleu_change_k3"}
    assert res["summary"]["int8_over_fp32_rtf"] == pytest.approx(rows["int8"]["rtf"] / rows["fp32"]["rtf"])
    assert res["summary"]["int8_bleu_change_k3"] == pytest.approx(rows["int8"]["bleu"]["de"] - rows["fp32"]["bleu"]["de"])
    assert res["config"]["n_utterances"] == 2 and 0.0 <= res["agreement"]["de"] <= 1.0
    assert "bench/bench_int8.py" in res["provenance"]["depends_on"]["paths"]
    assert "int8_over_fp32_rtf=" in stdout


def test_profile_categories():
    import bench_train

    c = bench_train.classify_op
    assert c("aten::addmm", ["aten::linear", "MMSTModel"]) == "matmul"
    assert c("aten::_scaled_dot_product_flash_attention_for_cpu_backward", []) == "matmul"
    assert c("aten::native_layer_norm", ["aten::layer_norm"]) == "elementwise"
    assert c("aten::mm", ["aten::linear", "loss"]) == "loss"  # under the loss scope: loss, whatever the op
    assert c("aten::_log_softmax_backward_data",
             ["LogSoftmaxBackward0", "autograd::engine::evaluate_function: LogSoftmaxBackward0"]) == "loss"
    assert c("aten::_fused_adamw_", ["Optimizer.step#AdamW.step"]) == "optimizer"
    assert c("aten::copy_", ["aten::to", "data"]) == "data"
    assert c("aten::bernoulli_", ["aten::dropout"]) == "elementwise"


def test_vs_fairseq_summary_keys_goals_and_dev_losses():
    import bench_vs_fairseq as vs

    by = {"fp32": {"ratio_median": 1.3, "equal_wall": {"cpu_seconds": 40.0, "ours_dev_loss": 2.5, "ours_updates": 39,
                                                       "fairseq_dev_loss": 2.6, "fairseq_updates": 30}},
          "bf16": {"ratio_median": 1.9}}
    dev = {"fairseq": [2.60, 2.70, 2.62], "ours_fp32": [2.71, 2.71, 2.80]}
    rows = [{"threads": 1, "s_per_update": 3.0, "mfu": 0.49}, {"threads": 2, "s_per_update": 2.0, "mfu": 0.37}]
    s = vs.summarize(by, dev, rows, 30, False)
    # compile off by default: the compiled ratio is the fp32 one; 1.3 < 1.5 and 0.37 < 0.5 are missed
    assert s["ratio_fp32_median"] == s["ratio_compiled_median"] == 1.3 and s["ratio_bf16_median"] == 1.9
    assert (s["mfu_s_1t"], s["mfu_s_2t"], s["speedup_2t_over_1t_s"]) == (0.49, 0.37, 1.5)
    assert s["met"] == {"ratio": False, "mfu_s_2t": False}
    assert s["dev_loss_equal_updates"] == {"updates": 30, "fairseq": 2.62, "ours_fp32": 2.71}
    assert s["dev_loss_equal_time"] == {"cpu_seconds": 40.0, "ours_fp32": 2.5, "ours_fp32_updates": 39,
                                        "fairseq": 2.6, "fairseq_updates": 30}
    # compile on by default: not measured here, so only the fp32 ratio counts; no MFU rows: unknown
    by["fp32"]["ratio_median"] = 1.5
    s = vs.summarize(by, dev, [], 30, "blocks")
    assert s["ratio_compiled_median"] is None and s["met"] == {"ratio": True, "mfu_s_2t": None}
    assert s["mfu_s_2t"] is None and s["speedup_2t_over_1t_s"] is None


def test_vs_fairseq_seed_summary():
    import bench_vs_fairseq as vs

    s = vs.seed_summary([{"seed": 1, "ours_fp32": 2.80, "fairseq": 2.79}, {"seed": 2, "ours_fp32": 2.71, "fairseq": 2.74},
                         {"seed": 3, "ours_fp32": 2.79, "fairseq": 2.80}])
    assert s["ours_fp32"] == pytest.approx({"mean": 2.7666667, "min": 2.71, "max": 2.80})
    assert s["ours_minus_fairseq"] == pytest.approx({"mean": -0.01, "min": -0.03, "max": 0.01})
    assert s["spread_over_seeds"] == pytest.approx(0.09)  # ours 2.71..2.80; fairseq 2.74..2.80


def test_bench_threads_plan_and_summary():
    import bench_threads as bt

    p = bt.plan(["s"], ["passive", "active"], 2)
    assert p == [(0, "s", 1, "passive"), (0, "s", 2, "passive"), (0, "s", 2, "active"),
                 (1, "s", 2, "active"), (1, "s", 2, "passive"), (1, "s", 1, "passive")]
    assert bt.settings(5000)["spin"] == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "5000"}
    rows = [{"size": "s", "threads": t, "setting": n, "s_per_update": v, "mfu": m, "peak_gflops": pk}
            for t, n, v, m, pk in [(1, "passive", 3.0, 0.5, 200.0), (1, "passive", 3.2, 0.5, 220.0),
                                   (2, "passive", 2.0, 0.4, 400.0), (2, "passive", 2.2, 0.4, 420.0),
                                   (2, "active", 1.6, 0.45, 410.0), (2, "active", 1.6, 0.45, 410.0)]]
    s = bt.summarize(rows)["s"]
    assert s["s_per_update_1t"] == pytest.approx(3.1)
    assert s["speedup_2t_over_1t"] == {"passive": pytest.approx(3.1 / 2.1), "active": pytest.approx(3.1 / 1.6)}
    assert s["peak_speedup_2t_over_1t"] == pytest.approx(410.0 / 210.0) and s["best_setting"] == "active"


def test_bench_int8_word_agreement_counts_positions():
    import bench_int8

    # utterance 1: 2 of 3 positions agree; utterance 2: int8 writes one word more (a position that differs)
    assert bench_int8.word_agreement([["a", "b", "c"], ["x"]], [["a", "z", "c"], ["x", "y"]]) == pytest.approx(3 / 5)


def test_gpu_check_without_cuda_says_so_in_one_line_and_exits_0():
    import os

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PY": sys.executable}
    r = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["gpu_check: no GPU (torch.cuda.is_available() is False); nothing measured"]


def test_bench_longform_omnisteval_summary_takes_the_largest_difference_and_fails_on_any_run():
    """``omnisteval_summary`` over two cross-checks: the largest difference per metric over every run
    (LongYAAL 2e-7 from the capped talk, SoftSeg_BLEU 3e-7 from the first), met only when every run is equal
    and scored; a run OmniSTEval did not score, or one that differs, makes it missed and is named."""
    import bench_longform as bl

    def cli(diff, equal=True):
        return {"max_abs_diff": diff, "tsv_max_abs_diff": {k: 4e-5 for k in diff}, "missing": [], "equal": equal}

    first = {"per_lang": {"de": {"segmented": {"BLEU": 1.0}, "vad": {"omnisteval_cli": cli({"LongYAAL": 0.0, "SoftSeg_BLEU": 3e-7})},
                                 "oracle": {"omnisteval_cli": cli({"LongYAAL": 1e-7, "SoftSeg_BLEU": 0.0})}}}}
    capped = {"per_lang": {"ja": {"segmented": {}, "vad": {"omnisteval_cli": cli({"LongYAAL": 2e-7})},
                                  "oracle": {"omnisteval_cli": cli({"LongYAAL": 0.0})}}}}
    s = bl.omnisteval_summary(first, capped)
    assert s["met"] is True and s["runs"] == 4 and s["langs"] == ["de", "ja"] and s["failed"] == s["not_scored"] == []
    assert s["max_abs_diff"] == {"LongYAAL": 2e-7, "SoftSeg_BLEU": 3e-7} and s["tsv_max_abs_diff"]["LongYAAL"] == 4e-5
    capped["per_lang"]["ja"]["vad"] = {"omnisteval_error": "omnisteval rejected ..."}
    first["per_lang"]["de"]["oracle"]["omnisteval_cli"] = cli({"LongYAAL": 2e-6}, equal=False)
    s = bl.omnisteval_summary(first, capped)
    assert s["met"] is False and s["failed"] == ["crosscheck oracle de"]
    assert s["not_scored"] == ["crosscheck_capped vad ja"] and s["max_abs_diff"]["LongYAAL"] == 2e-6
    assert bl.omnisteval_summary(None, None) is None
