"""Every policy through SimulEval's own command line (``simuleval --agent-class mmst.agents...``) on
two utterances of a tiny untrained checkpoint with a CTC head."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

POLICIES = [
    ["--policy", "waitk", "--policy-args", "k=2"],
    ["--policy", "alignatt", "--frame-num", "2", "--extract-attn-from-layer", "0"],
    ["--policy", "edatt", "--attn-threshold", "0.6", "--frame-num", "2"],
    ["--policy", "la", "--policy-args", "n=2", "--beam", "2"],
    ["--policy", "holdn", "--policy-args", "n=1"],
    ["--policy", "ctc", "--policy-args", "k=1"],
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch
    from eval_fixtures import make_tiny_system

    torch.set_num_threads(1)
    return make_tiny_system(tmp_path_factory.mktemp("pol_agent"), langs=("de", "es"),
                            size_overrides={"src_vocab_size": 16})


def _simuleval_in_process(argv: list[str], monkeypatch) -> subprocess.CompletedProcess:
    """SimulEval's ``main()`` with ``argv`` as its command line, in this process (it reads ``sys.argv``)."""
    from cli_runner import run_main
    from simuleval.cli import main

    def entry(args: list[str]) -> int:
        monkeypatch.setattr(sys, "argv", ["simuleval", *args])
        return main()

    return run_main(entry, argv)


@pytest.mark.parametrize("policy", POLICIES, ids=[p[1] for p in POLICIES])
def test_policy_through_simuleval_cli(tiny, tmp_path, policy, monkeypatch):
    """Each policy through SimulEval's entry point (in this process: a new one costs seconds of imports);
    the first one runs ``simuleval`` as a separate process, as a user does."""
    src = tmp_path / "src.list"
    src.write_text("".join(f"{w}\n" for w in tiny["wavs"][:2]))
    tgt = tmp_path / "tgt.txt"
    tgt.write_text("".join(f"{r}\n" for r in tiny["refs"]["de"][:2]))
    out = tmp_path / "out"
    argv = ["--agent-class", "mmst.agents.MMSTSpeechToTextAgent", "--model", str(tiny["ckpt"]),
            "--tgt-lang", "de", "--source", str(src), "--target", str(tgt), "--source-segment-size", "320",
            "--max-len-b", "6", "--min-len", "2", "--output", str(out), *policy]
    if policy[1] == "waitk":
        p = subprocess.run([str(Path(sys.executable).parent / "simuleval"), *argv], capture_output=True, text=True,
                           timeout=300)
    else:
        p = _simuleval_in_process(argv, monkeypatch)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = (out / "instances.log").read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        d = json.loads(line)
        assert d["prediction_length"] == len(d["delays"]) >= 1
        assert d["delays"] == sorted(d["delays"]) and d["delays"][-1] <= d["source_length"] + 1e-6


def test_bad_policy_exits_with_one_line(tiny, tmp_path):
    from argparse import Namespace

    from mmst.agents import MMSTSpeechToTextAgent

    base = dict(checkpoint=str(tiny["ckpt"]), data=None, tgt_lang="de", waitk_lagging=3, max_len_a=0.0,
                max_len_b=8, min_len=0, input_scale="auto", policy="alignatt", policy_args="frame=3",
                policy_per_lang=None, frame_num=None, extract_attn_from_layer=None, attn_threshold=None, beam=1)
    with pytest.raises(SystemExit, match="unknown parameter 'frame'.*frames, layer"):
        MMSTSpeechToTextAgent.from_args(Namespace(**base))
    with pytest.raises(SystemExit, match="one value for frames"):
        MMSTSpeechToTextAgent.from_args(Namespace(**dict(base, policy_args="frames=2,3")))
    agent = MMSTSpeechToTextAgent.from_args(Namespace(**dict(base, policy_args="frames=2",
                                                             policy_per_lang=["de=holdn:n=3"])))
    assert agent.translator.policies["de"].describe() == "holdn(n=3)"
