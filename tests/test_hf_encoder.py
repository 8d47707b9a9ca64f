"""Pretrained Hugging Face speech encoders (``encoder_type: hf``): tiny random wav2vec 2.0 / HuBERT / WavLM /
Whisper folders written with ``save_pretrained`` (nothing downloaded), loaded through the model config;
freezing, layer choice, layer-wise LR decay, time masks, training, wait-k masks over adapter frames,
and streaming with re-encoding (wait-k, AlignAtt, async, long form)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from hf_fixtures import HF_TYPES, LANGS, hf_config, hf_model, write_tiny_hf

from mmst.models import build_model
from mmst.models.masks import waitk_cross_mask
from mmst.simultaneous import StreamingTranslator, greedy_waitk_decode
from mmst.training.optim import InverseSqrtSchedule, build_optimizer, layerwise_param_groups

torch.set_num_threads(1)
pytestmark = pytest.mark.xdist_group("hf_encoder")  # one worker builds the module's encoder folders once


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {k: write_tiny_hf(k, root / k, seed=i) for i, k in enumerate(HF_TYPES)}


def speech(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t * (1 + t)) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def wave_batch(*clips):
    n = max(c.size for c in clips)
    x = torch.zeros(len(clips), n, 1)
    for i, c in enumerate(clips):
        x[i, : c.size, 0] = torch.from_numpy(c)
    return x, torch.tensor([c.size for c in clips])


# ------------------------------------------------------------------ loading and shapes
@pytest.mark.parametrize("kind", HF_TYPES)
def test_folder_loads_through_config_and_lengths_agree(folders, kind):
    m = hf_model(folders[kind])
    assert m.cfg.input_kind == "waveform" and m.encoder.model_type == kind
    assert m.encoder.frame_ms == 20.0 and m.encoder.state_ms == 40.0  # one stride-2 adapter conv
    x, n = wave_batch(speech(1.0), speech(0.61, 1))
    with torch.no_grad():
        enc = m.encode(x, n)
    # 1.0 s: wav2vec2 family 49 frames (kernels 10/8/8, strides 5/8/8), Whisper ceil(100 / 2) = 50 frames;
    # the stride-2 adapter (kernel 3, padding 1): floor((F - 1) / 2) + 1 = 25 states either way
    assert int(enc.lengths[0]) == 25
    assert enc.states.shape == (2, 25, 32)
    for b in range(2):  # the streaming front end's count of a finished source = the forward's
        assert m.encoder.num_states(int(n[b]), finished=True) == int(enc.lengths[b])
    assert not enc.padding_mask[1, : int(enc.lengths[1])].any() and enc.padding_mask[1, int(enc.lengths[1]):].all()


def test_whisper_rows_equal_alone_and_window_is_enforced(folders):
    m = hf_model(folders["whisper"])
    a, b = speech(1.3), speech(0.5, 2)
    x, n = wave_batch(a, b)
    with torch.no_grad():
        both = m.encode(x, n)
        alone = m.encode(*wave_batch(b))
        assert torch.allclose(both.states[1, : int(alone.lengths[0])], alone.states[0], atol=1e-5)
        with pytest.raises(ValueError, match="at most 2 s"):
            m.encode(*wave_batch(speech(2.2)))
    assert m.encoder.max_input_samples == 32000


def test_config_errors_name_the_key(folders):
    with pytest.raises(ValueError, match="hf_encoder_path"):
        hf_config(folders["wav2vec2"], hf_encoder_path=None)
    with pytest.raises(ValueError, match="encoder_attention.*offline"):
        hf_config(folders["wav2vec2"], encoder_attention="chunk-causal")
    with pytest.raises(ValueError, match="conv_kernel_sizes"):
        hf_config(folders["wav2vec2"], conv_kernel_sizes=[3, 3, 3, 3])
    with pytest.raises(ValueError, match="hf_layer"):
        hf_config(folders["wav2vec2"], hf_layer="mean")
    with pytest.raises(ValueError, match="hf_freeze"):
        hf_config(folders["wav2vec2"], hf_freeze="some")
    with pytest.raises(ValueError, match="hf_layer=5"):
        build_model(hf_config(folders["wav2vec2"], hf_layer=5))  # 2 layers: hidden states 0..2


def test_without_transformers_the_error_names_the_extra(folders, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "mmst.models.hf_encoder", raising=False)
    with pytest.raises(ImportError, match=r"pip install -e \.\[hf\]"):
        build_model(hf_config(folders["wav2vec2"]))


def test_core_does_not_import_transformers():
    import subprocess

    code = ("import sys, mmst.models, mmst.simultaneous, mmst.training.trainer; "
            "print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ------------------------------------------------------------------ freezing, layers, LR decay, masks
@pytest.mark.parametrize("kind", ["wav2vec2", "whisper"])
def test_freeze_modes(folders, kind):
    def trainable(m):
        return {n for n, p in m.encoder.hf.named_parameters() if p.requires_grad}

    every = {n for n, _ in hf_model(folders[kind]).encoder.hf.named_parameters()}
    assert trainable(hf_model(folders[kind], hf_freeze="none")) == every
    assert trainable(hf_model(folders[kind], hf_freeze="all")) == set()
    front = trainable(hf_model(folders[kind], hf_freeze="feature_extractor"))
    frozen = every - front
    prefixes = ("conv1.", "conv2.", "embed_positions.") if kind == "whisper" else ("feature_extractor.",)
    assert frozen and all(n.startswith(prefixes) for n in frozen)
    assert any(n.startswith("layers." if kind == "whisper" else "encoder.layers.") for n in front)
    m = hf_model(folders[kind], hf_freeze="all").train()
    assert not m.encoder.hf.training and m.encoder.proj.training


def test_hf_layer_picks_a_hidden_state_and_weighted_sum(folders):
    p = folders["hubert"]
    x, n = wave_batch(speech(0.8))
    last, mid, wsum = hf_model(p), hf_model(p, hf_layer=1), hf_model(p, hf_layer="weighted")
    mid.load_state_dict(last.state_dict())
    with torch.no_grad():
        hs = last.encoder.hf(x[..., 0], output_hidden_states=True).hidden_states
        assert len(hs) == 3
        h = hs[1]
        ref, _ = mid.encoder.subsample(mid.encoder.proj(h), mid.encoder.hf_lengths(n))
        assert torch.allclose(mid.encode(x, n).states, mid.encoder.layer_norm(ref), atol=1e-5)
        assert not torch.allclose(mid.encode(x, n).states, last.encode(x, n).states, atol=1e-3)
        # a weighted sum with all its weight on the last hidden state is hf_layer 2 (= the last, here)
        sd = {k: v for k, v in last.state_dict().items()}
        sd["encoder.layer_weights"] = torch.tensor([-1e4, -1e4, 0.0])
        wsum.load_state_dict(sd)
        assert torch.allclose(wsum.encode(x, n).states, last.encode(x, n).states, atol=1e-5)
    assert wsum.encoder.layer_weights.requires_grad


def test_layer_lr_decay_groups_and_schedule(folders):
    m = hf_model(folders["wav2vec2"])  # 2 layers; feature extractor frozen
    groups = layerwise_param_groups(m, 0.5)
    scales = {g["lr_scale"]: {id(p) for p in g["params"]} for g in groups}
    assert sorted(scales) == [0.25, 0.5, 1.0]
    hf = m.encoder.hf
    assert {id(p) for p in hf.encoder.layers[1].parameters()} <= scales[1.0]  # top layer
    assert {id(p) for p in hf.encoder.layers[0].parameters()} == scales[0.5]
    assert {id(p) for p in hf.feature_projection.parameters()} <= scales[0.25]
    assert {id(p) for p in m.decoder.parameters()} <= scales[1.0]
    assert not any(id(p) in s for s in scales.values() for p in hf.feature_extractor.parameters())  # frozen
    assert sum(len(s) for s in scales.values()) == sum(1 for p in m.parameters() if p.requires_grad)
    opt = build_optimizer(groups, 1e-3, [0.9, 0.98])
    sched = InverseSqrtSchedule(opt, 1e-3, warmup_updates=0)
    assert sorted(g["lr"] for g in opt.param_groups) == pytest.approx([2.5e-4, 5e-4, 1e-3])
    sched.step(), sched.step(), sched.step(), sched.step()  # lr * sqrt(1 / 4) = half
    assert sorted(g["lr"] for g in opt.param_groups) == pytest.approx([1.25e-4, 2.5e-4, 5e-4])
    assert len(layerwise_param_groups(m, 1.0)) == 1
    from policy_fixtures import make

    with pytest.raises(ValueError, match="layer_lr_decay"):
        layerwise_param_groups(make(), 0.5)  # mmst's own encoder has no pretrained layers


def test_time_masks_on_adapter_input(folders):
    m = hf_model(folders["wav2vec2"])
    m.encoder.set_time_masking(2, 20, 1.0)  # 20 fbank frames (200 ms) -> masks narrower than 10 frames of 20 ms
    assert m.encoder.time_mask == (2, 10, 1.0)
    h = torch.randn(2, 30, 32)
    n = torch.tensor([30, 12])
    torch.manual_seed(3)
    out = m.encoder._mask_time(h, n)
    changed = (out != h).any(-1)
    assert changed.any()
    for b in range(2):
        rows = changed[b].nonzero().flatten()
        assert len(rows) <= 2 * 9 and int(rows.max()) < int(n[b])
        mean = h[b, : int(n[b])].mean(0)
        assert torch.allclose(out[b, rows], mean.expand(len(rows), -1), atol=1e-6)
    m.encoder.set_time_masking(0, 20)
    assert m.encoder.time_mask is None


# ------------------------------------------------------------------ training
@pytest.mark.parametrize("kind", HF_TYPES)
def test_a_few_updates_lower_the_loss(folders, kind):
    torch.manual_seed(0)
    m = hf_model(folders[kind], dropout=0.0).train()
    x, n = wave_batch(speech(0.7), speech(0.5, 1))
    tgt = {"de": torch.tensor([[7, 8, 9, 2], [10, 11, 2, 1]]), "es": torch.tensor([[12, 13, 2, 1], [14, 2, 1, 1]])}
    prev = {lang: torch.cat([torch.full((2, 1), m.start_token_id(lang)), t[:, :-1].masked_fill(t[:, :-1] == 2, 1)], 1)
            for lang, t in tgt.items()}
    opt = build_optimizer(layerwise_param_groups(m, 0.8), 3e-3, [0.9, 0.98])
    losses = []
    for _ in range(6):
        out = m(x, n, prev, waitk=2)
        loss = sum(torch.nn.functional.cross_entropy(out.logits[lang].flatten(0, 1), t.flatten(), ignore_index=1)
                   for lang, t in tgt.items())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.8 * losses[0], losses


def test_waitk_mask_counts_adapter_frames(folders):
    m = hf_model(folders["whisper"])  # R = 3 adapter frames (120 ms)
    x, n = wave_batch(speech(1.0), speech(0.45, 1))
    with torch.no_grad():
        enc = m.encode(x, n)
    assert enc.lengths.tolist() == [25, 12]  # 0.45 s: ceil(ceil(7200 / 160) / 2) = 23 frames -> 12 states
    mask = m.cross_attn_mask(enc, 4, 2)  # token i (0-based) sees min((2 + i) * 3, S_b) states
    for b, s in enumerate([25, 12]):
        for i in range(4):
            assert int(mask[b, i].sum()) == min((2 + i) * 3, s)
    assert torch.equal(mask, waitk_cross_mask(4, enc.lengths, 25, 2, 3))


# ------------------------------------------------------------------ streaming (re-encoding)
@pytest.mark.parametrize("kind", ["wav2vec2", "whisper"])
@pytest.mark.parametrize("policy", ["waitk:k=2", "alignatt:frames=2", "async"])
def test_streaming_the_whole_source_equals_offline_decoding(folders, kind, policy):
    """Source given at once: wait-k writes the masked wait-k decode over the offline encoding, AlignAtt the
    full-attention greedy decode, an async model its masked async decode."""
    kw = dict(strategy="async", async_delta=1) if policy == "async" else {}
    m = hf_model(folders[kind], seed=1, **kw)
    wav = speech(1.5, 4)
    k = None if policy.startswith("alignatt") else 2
    ref = greedy_waitk_decode(m, *wave_batch(wav), LANGS, k, 0.0, 12)
    tr = StreamingTranslator(m, None, LANGS, policy=None if policy == "async" else policy, waitk=2, max_len_b=12)
    tr.accept_audio(wav, finished=True)
    for lang in LANGS:
        assert tr.tokens[lang] == ref[lang][0], lang
    assert any(ref[lang][0] for lang in LANGS)


@pytest.mark.parametrize("policy", ["waitk:k=2", "alignatt:frames=2"])
def test_streaming_reencodes_and_never_revises(folders, policy):
    m = hf_model(folders["wav2vec2"], seed=2)
    wav = speech(1.6, 5)
    tr = StreamingTranslator(m, None, LANGS, policy=policy, max_len_a=0.5, max_len_b=2)  # cap grows with the source
    assert tr.frontend.mode == "reencode" and tr.frontend.waveform
    seen = {lang: [] for lang in LANGS}
    versions = []
    starts = list(range(0, wav.size, 4000))  # 250 ms
    for j, s in enumerate(starts):
        tr.accept_audio(wav[s : s + 4000], finished=j == len(starts) - 1)
        for lang in LANGS:
            assert tr.tokens[lang][: len(seen[lang])] == seen[lang]  # written tokens stay
            seen[lang] = list(tr.tokens[lang])
        if not all(tr.done.values()):
            versions.append(tr.frontend.version)
        if j == 1:  # 500 ms received: 24 frames -> 12 states, usable in whole chunks of R = 3
            assert tr.frontend.num_states == 12
    assert len(versions) >= 4 and versions == sorted(set(versions))  # re-encoded at every chunk while writing
    with torch.no_grad():
        offline = m.encode(*wave_batch(wav)).states
    assert torch.allclose(tr.frontend.states(), offline, atol=1e-5)  # at source end: the offline states
    assert any(seen[lang] for lang in LANGS)


def test_longform_caps_segments_at_the_whisper_window(folders):
    from mmst.simultaneous.longform import LongFormTranslator

    tr = StreamingTranslator(hf_model(folders["whisper"]), None, LANGS, waitk=2, max_len_b=5)
    with pytest.raises(ValueError, match="max-segment-s at most 2"):
        LongFormTranslator(tr, max_segment_s=20.0)
    assert LongFormTranslator(tr, max_segment_s=2.0).max_segment_s == 2.0


# ------------------------------------------------------------------ checkpoint, trainer, agent, long form
@pytest.fixture(scope="module")
def hf_system(folders, tmp_path_factory):
    """DATA of 16 kHz utterances with wav/offset/duration (train = the test set) and an untrained
    checkpoint of a unified model over the tiny wav2vec 2.0 folder."""
    import shutil

    from eval_fixtures import make_tiny_system

    root = tmp_path_factory.mktemp("hf_system")
    sysd = make_tiny_system(root, durations_s=(1.7, 2.1, 0.9), size_overrides=dict(
        encoder_type="hf", hf_encoder_path=str(folders["wav2vec2"]), encoder_attention="offline",
        conv_kernel_sizes=[3], pre_decision_ratio=3))
    shutil.copy(sysd["data"] / "tst-COMMON.tsv", sysd["data"] / "train.tsv")
    return sysd


def test_trainer_reads_waveforms_with_time_masks_and_layer_lr_decay(hf_system, folders, tmp_path):
    from mmst.training.config import ConfigError, load_config
    from mmst.training.trainer import build_trainer

    base = ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "data.max_tokens=1000",
            "data.valid_subset=tst-COMMON", "valid.interval_updates=0", "valid.bleu_subset=2", "optim.warmup_updates=2",
            "optim.max_update=3", "waitk_lagging=[1,3]", "model.overrides.encoder_type=hf",
            f"model.overrides.hf_encoder_path={folders['wav2vec2']}", "model.overrides.encoder_attention=offline",
            "model.overrides.conv_kernel_sizes=[3]", "model.overrides.d_model=32", "model.overrides.decoder_layers=1",
            "model.overrides.attention_heads=2", "model.overrides.ffn_dim=64", "model.overrides.conv_channels=64"]
    cfg = load_config(None, [*base, "optim.layer_lr_decay=0.5", "data.augment.specaugment={time_mask_N: 2, time_mask_T: 20}"])
    tr = build_trainer(cfg, hf_system["data"], tmp_path / "run")
    ds = tr.train_iter.dataset
    assert ds.input_kind == "waveform" and ds.augment is None
    item = ds[1]
    assert item["fbank"].shape == (int(round(2.1 * 16000)), 1)  # the samples of wav/offset/duration
    assert tr.model.encoder.time_mask == (2, 10, 1.0)
    assert sorted({g["lr_scale"] for g in tr.optimizer.param_groups}) == [0.25, 0.5, 1.0]
    tr.train()
    assert (tmp_path / "run" / "checkpoint_last.pt").is_file()
    with pytest.raises(ConfigError, match="time masks only"):
        build_trainer(load_config(None, [*base, "data.augment.specaugment_policy=LB"]), hf_system["data"], tmp_path / "x")


def test_agent_and_longform_stream_an_hf_checkpoint(hf_system):
    from argparse import Namespace

    import soundfile as sf
    from simuleval.data.segments import SpeechSegment

    from mmst.agents import MMSTSpeechToTextAgent
    from mmst.evaluation.loading import load_system
    from mmst.evaluation.longform import stream_talk
    from mmst.simultaneous.longform import LongFormTranslator, OracleSegmenter

    args = Namespace(checkpoint=str(hf_system["ckpt"]), mmst_data=None, tgt_lang="de", waitk_lagging=2, max_len_a=0.0,
                     max_len_b=6, min_len=6, input_scale="auto")
    agent = MMSTSpeechToTextAgent.from_args(args)
    x = sf.read(hf_system["wavs"][1], dtype="float32")[0]
    words, step = [], 0
    while step < x.size:
        chunk = x[step : step + 5120]
        step += 5120
        out = agent.pushpop(SpeechSegment(content=chunk.tolist(), sample_rate=16000, finished=step >= x.size,
                                          tgt_lang="de"))
        if not out.is_empty:
            words += out.content.split()
    assert len(words) >= 1
    system = load_system(hf_system["ckpt"])
    assert system.model.encoder.input_kind == "waveform"
    d = x.size / 16000
    lf = LongFormTranslator(system.translator(2, max_len_b=6, min_len=2), max_segment_s=3.0,
                            vad=OracleSegmenter([(0.0, d), (d + 1.0, 2 * d + 1.0)]))
    talk = np.concatenate([x, np.zeros(16000, np.float32), x])
    run = stream_talk(lf, talk, ["de", "es"])
    assert len(run.segments) == 2
    for lang in ("de", "es"):  # each segment re-encoded from its own start: the same words twice
        texts = [w.text for w in run.words[lang]]
        assert texts and texts[: len(texts) // 2] == texts[len(texts) // 2 :]


# ------------------------------------------------------------------ the exported model folder
def _hf_train_overrides(hf_path) -> list[str]:
    return ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "data.max_tokens=1000",
            "data.valid_subset=", "valid.bleu_subset=0", "optim.warmup_updates=1", "optim.lr=0.003",
            "model.overrides.encoder_type=hf", f"model.overrides.hf_encoder_path={hf_path}",
            "model.overrides.encoder_attention=offline", "model.overrides.conv_kernel_sizes=[3]",
            "model.overrides.d_model=32", "model.overrides.decoder_layers=1", "model.overrides.attention_heads=2",
            "model.overrides.ffn_dim=64", "model.overrides.conv_channels=64", "model.overrides.dropout=0.0"]


def test_model_folder_carries_the_hf_encoder(hf_system, folders, tmp_path, monkeypatch):
    """Train 2 updates over a copy of the tiny wav2vec 2.0 folder, export, delete the copy: ``--model`` loads
    the trained weights from model.safetensors and the encoder's config from hf_encoder/ (no pretrained
    weights read, no pickle) and writes the same words on a stream; training starts from the folder."""
    import json
    import shutil

    import soundfile as sf

    from mmst.evaluation.loading import load_system
    from mmst.export import export_model
    from mmst.models.checkpoint import load_model
    from mmst.training.config import load_config
    from mmst.training.trainer import build_trainer

    hf_copy = shutil.copytree(folders["wav2vec2"], tmp_path / "w2v_pretrained")
    tr = build_trainer(load_config(None, [*_hf_train_overrides(hf_copy), "optim.max_update=2"]), hf_system["data"],
                       tmp_path / "run")
    tr.train()
    ckpt = tmp_path / "run" / "checkpoint_last.pt"
    folder = export_model(ckpt, tmp_path / "model")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model"]["hf_encoder_path"] == "hf_encoder" and cfg["training"]["hf_encoder_path"] == str(hf_copy)
    assert sorted(p.name for p in (folder / "hf_encoder").iterdir()) == ["config.json"]  # weights: model.safetensors
    assert json.loads((folder / "hf_encoder" / "config.json").read_text())["model_type"] == "wav2vec2"
    x = sf.read(hf_system["wavs"][1], dtype="float32")[0]

    def stream(system):
        t = system.translator(2, max_len_b=6, min_len=2)
        t.reset()
        return [{lang: [(w.text, w.delay_ms, tuple(w.tokens)) for w in ws] for lang, ws in
                 t.accept_audio(x[i : i + 5120], finished=i + 5120 >= x.size).items()} for i in range(0, x.size, 5120)]

    before = stream(load_system(ckpt))
    trained = torch.load(ckpt, weights_only=True)["model"]
    pretrained = hf_model(hf_copy).state_dict()
    name = "encoder.hf.encoder.layers.1.attention.q_proj.weight"
    assert not torch.equal(trained[name], pretrained[name])  # 2 updates moved the pretrained layers
    shutil.rmtree(hf_copy)

    def no_pickle(*a, **k):
        raise AssertionError("torch.load called while loading a model folder")

    import transformers

    def no_pretrained(*a, **k):
        raise AssertionError("pretrained weights read while loading a model folder")

    with monkeypatch.context() as mp:
        mp.setattr(torch, "load", no_pickle)
        mp.setattr(transformers.PreTrainedModel, "from_pretrained", no_pretrained)
        model, info = load_model(folder)
        system = load_system(folder)  # what every --model MODEL_DIR goes through
    assert info["model_cfg"]["hf_encoder_path"] == str(folder.resolve() / "hf_encoder")
    for k, v in trained.items():
        assert torch.equal(model.state_dict()[k], v), k
    after = stream(system)
    assert after == before and sum(len(ws) for step in after for ws in step.values()) > 0
    # training starts from the folder (checkpoint.init_from): its every weight, the pretrained copy gone
    again = build_trainer(load_config(None, [*_hf_train_overrides(tmp_path / "gone"), f"checkpoint.init_from={folder}"]),
                          hf_system["data"], tmp_path / "run2")
    for k, v in trained.items():
        assert torch.equal(again.model.state_dict()[k], v), k
    # the hf_encoder/ folder alone is a config, not a pretrained encoder: the error says where the weights are
    with pytest.raises(FileNotFoundError, match="checkpoint.init_from=MODEL_DIR"):
        build_model(hf_config(folder / "hf_encoder"))



def test_training_stores_a_relative_encoder_path_absolute(hf_system, folders, tmp_path, monkeypatch):
    """``model.overrides.hf_encoder_path`` typed relative to the working directory is stored absolute in the
    checkpoint's model config, so the checkpoint loads from another directory."""
    import shutil

    from mmst.models.checkpoint import load_model
    from mmst.training.config import load_config
    from mmst.training.trainer import build_trainer

    shutil.copytree(folders["wav2vec2"], tmp_path / "enc" / "w2v")
    monkeypatch.chdir(tmp_path)
    tr = build_trainer(load_config(None, [*_hf_train_overrides("enc/w2v"), "optim.max_update=1"]), hf_system["data"],
                       tmp_path / "run")
    tr.train()
    ckpt = tmp_path / "run" / "checkpoint_last.pt"
    saved = torch.load(ckpt, weights_only=True)
    assert saved["model_cfg"]["hf_encoder_path"] == str((tmp_path / "enc" / "w2v").resolve())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    model, info = load_model(ckpt)
    assert model.encoder.model_type == "wav2vec2"


def test_encoder_folders_are_local_only(folders, tmp_path, monkeypatch):
    """A path that is not a local folder (a relative path read from another directory, a hub id) stops with
    one line naming the key and the path before ``transformers`` is called; every ``from_pretrained`` of a
    folder passes ``local_files_only=True`` (no network, whatever HF_HUB_OFFLINE says)."""
    import transformers

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls = []

    def recording(owner):
        orig = owner.from_pretrained.__func__

        def from_pretrained(cls, *a, **k):
            calls.append((owner.__name__, k))
            return orig(cls, *a, **k)

        monkeypatch.setattr(owner, "from_pretrained", classmethod(from_pretrained))

    for owner in (transformers.AutoConfig, transformers.PreTrainedModel, transformers.WhisperFeatureExtractor):
        recording(owner)
    monkeypatch.chdir(tmp_path)
    for path in ("enc/w2v", "facebook/wav2vec2-base-960h"):
        with pytest.raises(FileNotFoundError) as e:
            build_model(hf_config(path))
        assert str(e.value) == (f"model config: hf_encoder_path {path!r}: no such folder (mmst reads pretrained "
                                "encoders from local folders only; give the folder's path)")
    assert calls == []
    for kind in ("wav2vec2", "whisper"):
        build_model(hf_config(folders[kind]))
    assert {name for name, _ in calls} == {"AutoConfig", "PreTrainedModel", "WhisperFeatureExtractor"}
    assert all(k.get("local_files_only") is True for _, k in calls), calls

# ------------------------------------------------------------------ DDP and DropCompute, W = 2
def test_ddp_and_dropcompute_over_an_hf_encoder_equal_one_process(folders):
    """W = 2 ranks (spawned, gloo) through the trainer's adapters: one DDP update and one DropCompute update
    (tau = inf) over the tiny wav2vec 2.0 encoder (feature extractor frozen, an unused pretrained parameter)
    give the parameters of one process over the 4 micro-batches (unequal token counts; each rank starts
    from other random adapter and decoder weights, rank 0's are broadcast).

    Slow: DDP and DropCompute jobs of local gloo ranks over a tiny HF encoder, against one process (the ranks
    are forked from the tests' fork server, distributed_fixtures.launch: they import transformers, not torch)."""
    from distributed_fixtures import launch
    from hf_fixtures import hf_dist_rank, hf_update

    from mmst.training.strategy import SingleProcessStrategy

    res = launch([str(folders["wav2vec2"])], 2, timeout_s=300, target=hf_dist_rank)
    for r in (0, 1):
        assert "error" not in res[r], res[r].get("traceback", res[r])
    model = hf_model(folders["wav2vec2"], seed=0)
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = torch.tensor(hf_update(model, SingleProcessStrategy(precision="fp32")))
    assert (ref - start).abs().max() > 1e-2  # the update moved the parameters
    for mode in ("ddp", "dropcompute"):
        a, b = torch.tensor(res[0][mode]), torch.tensor(res[1][mode])
        assert torch.equal(a, b), mode  # the ranks agree
        assert torch.allclose(a, ref, atol=2e-6, rtol=0), (mode, float((a - ref).abs().max()))
