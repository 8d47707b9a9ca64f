"""``--quantize int8``: dynamic int8 linear layers (``mmst.models.quantize``) and the options that reach them."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from torch import nn

from mmst.models.quantize import Int8DynamicLinear, int8_error_bound, quantize_model


def test_int8_linear_worked_by_hand():
    # W = [[1, 1]]: s_w = 1/127, Wq = [127, 127]. x = [1, 0.3]: s_x = 1/127, xq = [127, round(38.1) = 38].
    # y = s_x s_w (127*127 + 38*127) = 165/127 (fp32: 1.3); the bias is added in fp32.
    lin = nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 1.0]]))
        lin.bias.fill_(0.5)
    q = Int8DynamicLinear(lin)
    assert q.weight_int8_t.dtype == torch.int8 and q.weight_int8_t.flatten().tolist() == [127, 127]
    y = q(torch.tensor([[1.0, 0.3]]))
    assert y.item() == pytest.approx(165 / 127 + 0.5, abs=1e-6)
    assert q(torch.zeros(1, 2)).item() == pytest.approx(0.5)  # an all-zero row: scale 1, no division by 0


def test_int8_linear_within_the_rounding_bound_of_fp32():
    g = torch.Generator().manual_seed(0)
    lin = nn.Linear(48, 40)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(40, 48, generator=g) * 0.2)
        lin.bias.copy_(torch.randn(40, generator=g))
    x = torch.randn(3, 5, 48, generator=g) * torch.linspace(0.01, 3.0, 48)  # uneven columns, 3-D input
    q = Int8DynamicLinear(lin)
    with torch.no_grad():
        err = (q(x) - lin(x)).abs().reshape(15, 40)
        bound = int8_error_bound(x.reshape(15, 48), lin.weight)
    assert q(x).shape == (3, 5, 40)
    assert bool((err <= bound + 1e-5).all())
    assert err.max() > 1e-4  # it is int8 arithmetic, not the fp32 layer
    assert err.max() < 0.5 * bound.max()  # and the bound is not vacuous for these rows


def test_quantize_model_swaps_every_linear_and_warns_nothing(tiny_system):
    from mmst.models.checkpoint import load_model_from_checkpoint

    model, _ = load_model_from_checkpoint(tiny_system["ckpt"], map_location="cpu")
    n_linear = sum(isinstance(m, nn.Linear) for m in model.modules())
    assert n_linear > 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecated quantization API on the way
        quantize_model(model.eval(), "int8")
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert sum(isinstance(m, Int8DynamicLinear) for m in model.modules()) == n_linear
    assert quantize_model(nn.Linear(2, 2), "none").__class__ is nn.Linear
    with pytest.raises(ValueError, match="none, int8"):
        quantize_model(nn.Linear(2, 2), "int4")


def test_int8_stream_writes_the_fp32_text_in_most_positions(tiny_system):
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.loading import LoadError, load_system
    from mmst.evaluation.streaming import stream_utterance
    from mmst.evaluation.utterances import load_utterances

    with pytest.raises(LoadError, match="none, int8"):
        load_system(tiny_system["ckpt"], tiny_system["data"], quantize="fp8")
    words = {}  # the untrained model writes one long "word" per utterance: compare characters
    for mode in ("none", "int8"):
        system = load_system(tiny_system["ckpt"], tiny_system["data"], ["de"], quantize=mode)
        tr = system.translator(3, max_len_b=12)
        utts = load_utterances(system.data_dir, "tst-COMMON", ["de"], 2)
        words[mode] = [w for u in utts for w in
                       stream_utterance(tr, read_utterance_audio(u), ["de"], {"de": "char"},
                                        utt_id=u["id"]).per_lang["de"].units]
    same = sum(a == b for a, b in zip(words["none"], words["int8"], strict=False))
    assert len(words["none"]) >= 20
    assert same / max(len(words["none"]), len(words["int8"])) >= 0.8


@pytest.mark.parametrize("module", ["mmst.cli.simultaneous_eval", "mmst.cli.longform_eval",
                                    "mmst.cli.transcribe_stream", "mmst.serve.cli"])
def test_every_model_loading_cli_takes_quantize(module):
    p = importlib.import_module(module).build_parser()
    assert "--quantize" in p.format_help()
    dest = {a.dest: a for a in p._actions}
    assert dest["quantize"].default == "none" and list(dest["quantize"].choices) == ["none", "int8"]


def test_agent_passes_quantize_to_the_model(tiny_system):
    from argparse import ArgumentParser

    from mmst.agents import MMSTSpeechToTextAgent, build_translator_from_args
    from mmst.simultaneous import StreamingTranslator

    p = ArgumentParser()
    MMSTSpeechToTextAgent.add_args(p)
    args = p.parse_args(["--model", str(tiny_system["ckpt"]), "--mmst-data", str(tiny_system["data"]),
                         "--tgt-lang", "de", "--quantize", "int8"])
    tr = build_translator_from_args(args, ["de"])
    while not isinstance(tr, StreamingTranslator):
        tr = tr.inner
    assert any(isinstance(m, Int8DynamicLinear) for m in tr.model.modules())


def test_hf_encoders_stay_fp32_and_the_rest_is_quantized(tmp_path):
    """With a pretrained Hugging Face encoder (``encoder_type: hf``) only mmst's own linear layers (length
    adapter, decoder) become int8: WavLM's attention reads its projections' weights directly."""
    pytest.importorskip("transformers")
    from hf_fixtures import hf_model, write_tiny_hf
    from test_hf_encoder import HF_TYPES, speech, wave_batch

    for kind in HF_TYPES:
        m = hf_model(write_tiny_hf(kind, tmp_path / kind)).eval()
        x, n = wave_batch(speech(0.8))
        with torch.no_grad():
            ref = m.encode(x, n).states
            quantize_model(m, "int8")
            got = m.encode(x, n).states
        left = [name.rpartition(".")[0] for name, mod in m.named_modules() if isinstance(mod, nn.Linear)]
        owners = {type(m.get_submodule(p)).__module__.split(".")[0] for p in left}
        assert left and owners == {"transformers"}, kind  # every fp32 linear layer is the pretrained encoder's
        assert any(isinstance(mod, Int8DynamicLinear) for mod in m.decoder.modules()), kind
        assert got.shape == ref.shape
        assert float((got - ref).norm() / ref.norm()) < 0.05, kind
