"""Where the time of ``make test`` goes: the pytest suite's wall time and its slowest tests, with their causes.

Runs the suite once (``python -m pytest -q --junitxml ...``; extra pytest arguments after ``--``), or reads
the JUnit XML of a run that already happened (``--junit FILE --wall-s S``), and writes

- ``totals``: wall seconds of pytest, the sum of the per-test seconds, passed / failed / skipped counts;
- ``slowest``: the ``--top`` slowest tests (setup + call + teardown, as JUnit XML records them), each with
  its cause (what the test spends its time on: training a model, spawning torchrun, a browser, a
  subprocess, synthesizing audio...), read off :data:`CAUSES`;
- ``by_file``: the seconds of each test file.

``docs/development.md`` renders the table (``python tools/render_docs.py``). The time budget it states
(12 minutes of pytest on 2 cores) is checked against ``totals.wall_s`` of a run on such a machine.

Example::

    python bench/bench_test_durations.py --out docs/results/test_durations.json             # as make test runs it
    python bench/bench_test_durations.py --out /tmp/d.json -- -n 0 tests/test_latency.py    # one file, no workers
    python bench/bench_test_durations.py --junit before.xml --wall-s 1472.9 --out /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from provenance import finish_record, run_record

from mmst.cli_help import ArgumentParser
from mmst.provenance import unknown_dependencies

REPO = Path(__file__).resolve().parents[1]

#: The source paths this measurement exercises: the whole test suite and the code under test.
DEPENDS_ON = ("bench/bench_test_durations.py", "tests/", "mmst/", "recipes/", "eval/", "data_prep/", "tools/",
              "Makefile", "pyproject.toml")

#: What a test spends its time on, by the first matching pattern (a regular expression over the test id
#: ``tests/test_x.py::test_name[param]``). The causes are read off the tests' code.
CAUSES: tuple[tuple[str, str], ...] = (
    (r"test_synthetic_compare_recipe_tiny", "run_compare.sh: trains, averages and evaluates 9 tiny models, then 1 more for an added seed (about 30 Python processes)"),
    (r"test_ted_mmst_recipe_all_stages_tiny", "the TED-MMST recipe (module fixture): synthesizes and aligns a corpus, ASR pretraining, 3 systems trained, averaged, evaluated, long form"),
    (r"test_compile_true_trains_again", "torch.compile of the whole tiny model in a fresh process (g++ builds inductor's kernels), then again on the warm cache"),
    (r"test_compiled_blocks_match_eager", "torch.compile of the elementwise blocks in a fresh process, against eager in another"),
    (r"test_backbones_recipe_tiny", "run_backbones.sh: tiny HF encoder folders (transformers), ASR pretraining, 3 trainings, evaluation, in subprocesses"),
    (r"test_vs_fairseq_our_side", "trains the 27M-parameter s2t_transformer_s for 2 updates in fp32 and bf16 (bf16 is emulated on AVX2 CPUs), in subprocesses"),
    (r"test_bench_stragglers_mmst", "torchrun runs of DDP, DropCompute and the parameter server on the tiny model (W = 2, one slow rank)"),
    (r"test_synthetic_recipe_all_stages_tiny", "recipes/synthetic/run.sh, every stage at toy scale: espeak synthesis, prep, speed perturbation, ASR pretraining, training, evaluation, long form, export; then two reruns"),
    (r"test_tiny_training_reaches_training_set_bleu", "trains a tiny model until it reproduces its training sentences (BLEU on the training set)"),
    (r"test_sigkill_resume", "trains in a subprocess, kills it with SIGKILL, resumes, and compares with an uninterrupted run"),
    (r"test_recipe_|test_walkthrough", "runs a recipe or the README walkthrough end to end (synthesis, prep, training, evaluation, in subprocesses)"),
    (r"test_compile\.py", "torch.compile: builds inductor graphs (two processes for the warm-cache case)"),
    (r"test_distributed|test_param_server", "spawns torchrun / several gloo processes and trains a tiny model in each"),
    (r"test_serve_browser", "starts headless Chromium and a live server"),
    (r"test_serve_", "a live mmst-serve over websockets with a tiny model; real-time pacing"),
    (r"test_bench_smoke", "runs a benchmark script in a subprocess at toy size"),
    (r"test_trainer\.py|test_checkpoint\.py|test_augment\.py|test_asr_view", "trains a tiny model (updates, validation, checkpoints)"),
    (r"test_hf_encoder", "builds tiny pretrained encoders with transformers and trains or streams them"),
    (r"test_simuleval|test_policies_simuleval", "runs SimulEval's own agent pipeline in a subprocess"),
    (r"test_longform|test_transcribe_stream", "streams a long synthetic recording through VAD and the model"),
    (r"test_mustc|test_prep_|test_synthetic|test_docs_commands", "synthesizes audio (espeak-ng) and extracts fbank"),
    (r"test_agent|test_simultaneous_eval|test_score_cli|test_unseen_gap|test_compare", "evaluation CLI on a tiny system"),
    (r"test_policy|test_policies", "decodes every policy on scripted or tiny models"),
    (r"test_quantize|test_precision|test_kvcache|test_models|test_async", "tiny-model forward passes in many configurations"),
)


#: The pytest arguments of ``make test`` (``PYTEST_XDIST`` in the Makefile): used when none are given.
MAKE_TEST_ARGS = ["-n", "2", "--dist", "loadgroup"]


def cause_of(test_id: str) -> str:
    """The cause of :data:`CAUSES` whose pattern matches ``test_id``; ``"other"`` when none does."""
    for pattern, cause in CAUSES:
        if re.search(pattern, test_id):
            return cause
    return "other"


def parse_junit(path: Path) -> list[dict]:
    """``[{"id", "seconds", "outcome"}]`` of every test case in a pytest JUnit XML file.

    The id is ``tests/<file>.py::<name>`` (pytest's node id, rebuilt from ``classname`` and ``name``);
    ``outcome`` is ``passed``, ``failed``, ``error`` or ``skipped``.
    """
    root = ET.parse(path).getroot()
    rows = []
    for tc in root.iter("testcase"):
        cls, name = tc.get("classname", ""), tc.get("name", "")
        parts = cls.split(".")
        # classname "tests.test_x" or "tests.test_x.TestClass"
        n_mod = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        file = "/".join(parts[:n_mod + 1]) + ".py"
        test_id = "::".join([file, *parts[n_mod + 1:], name])
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if tc.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        rows.append({"id": test_id, "seconds": float(tc.get("time", 0.0)), "outcome": outcome})
    return rows


def summarize(rows: list[dict], wall_s: float, top: int) -> dict:
    """The ``totals``, ``slowest`` and ``by_file`` sections (see the module docstring)."""
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "error", "skipped")}
    by_file: dict[str, float] = {}
    for r in rows:
        f = r["id"].split("::", 1)[0]
        by_file[f] = by_file.get(f, 0.0) + r["seconds"]
    slowest = sorted(rows, key=lambda r: -r["seconds"])[:top]
    return {
        "totals": {"wall_s": round(wall_s, 1), "sum_test_s": round(sum(r["seconds"] for r in rows), 1),
                   "tests": len(rows), **counts},
        "slowest": [{**r, "seconds": round(r["seconds"], 2), "cause": cause_of(r["id"])} for r in slowest],
        "by_file": {f: round(s, 1) for f, s in sorted(by_file.items(), key=lambda x: -x[1])},
    }


def tree_matches_commit(commit: str, paths: tuple[str, ...] = DEPENDS_ON, repo: Path = REPO) -> bool:
    """True when every file under ``paths`` in this checkout is as it was at ``commit``: no tracked file differs
    (``git diff``) and no untracked, unignored file was added. The digests of this checkout then describe the
    code that the imported run tested, and the record can hold them; otherwise its dependencies are unknown.
    False, too, when git cannot tell (no repository, an unknown commit)."""
    pathspec = ["--", *(x.rstrip("/") for x in paths)]
    try:
        same = subprocess.run(["git", "diff", "--quiet", commit, *pathspec], cwd=repo,
                              capture_output=True).returncode == 0
        added = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", *pathspec], cwd=repo,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return same and not added


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="bench/bench_test_durations.py", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the results JSON to write")
    ap.add_argument("--top", type=int, default=40, help="how many of the slowest tests to record")
    ap.add_argument("--junit", type=Path, default=None,
                    help="read this JUnit XML of a finished run instead of running the suite (needs --wall-s)")
    ap.add_argument("--wall-s", type=float, default=None, help="with --junit: the wall seconds of that run")
    ap.add_argument("--commit", default=None,
                    help="with --junit: the git commit that run tested; its file digests are recorded when this "
                         "checkout's files equal that commit's, else they are unknown")
    ap.add_argument("--note", default="", help="a free-text note recorded beside the command (the machine's load...)")
    ap.add_argument("pytest_args", nargs="*",
                    help="arguments for pytest, after -- (default: make test's, " + " ".join(MAKE_TEST_ARGS) + ")")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)
    if args.note:
        record["note"] = args.note
    if args.commit:
        record["git_commit"] = args.commit
        if not tree_matches_commit(args.commit, DEPENDS_ON):
            record["depends_on"] = unknown_dependencies(DEPENDS_ON, f"imported from a run at commit {args.commit}")
    if args.junit is not None:
        if args.wall_s is None:
            raise SystemExit("bench_test_durations.py: --junit needs --wall-s (the wall seconds of that run)")
        xml, wall, rc = args.junit, args.wall_s, None
    else:
        xml = Path(tempfile.mkdtemp(prefix="mmst-durations-")) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", f"--junitxml={xml}", *(args.pytest_args or MAKE_TEST_ARGS)]
        print("running:", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        wall = time.perf_counter() - t0
    used = args.pytest_args if (args.pytest_args or args.junit is not None) else MAKE_TEST_ARGS
    out = {"provenance": finish_record(record), "pytest_args": used, "exit_code": rc,
           **summarize(parse_junit(xml), wall, args.top)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    t = out["totals"]
    print(f"\npytest wall {t['wall_s']:.0f} s; {t['tests']} tests ({t['passed']} passed, {t['failed']} failed, "
          f"{t['error']} errors, {t['skipped']} skipped); sum of test seconds {t['sum_test_s']:.0f}")
    print(f"{'seconds':>8}  test")
    for r in out["slowest"]:
        print(f"{r['seconds']:8.1f}  {r['id']}  ({r['cause']})")
    print(f"wrote {args.out}")
    return 0 if rc in (None, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
