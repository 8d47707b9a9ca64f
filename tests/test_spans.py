"""Multi-sentence training (``mmst.data.spans``): the plan of spans on a hand-built manifest (5 utterances in
2 talks), the items of a span (audio, features, joined targets) on a prepared MuST-C-layout corpus, and
training on spans under multi-k with both decoder types."""

from __future__ import annotations

import numpy as np
import pytest

from mmst.data.spans import SpanDataset, join_texts, plan_spans

# 5 utterances of 2 talks, in a manifest order that is not the speaking order. In 16 kHz samples:
# a.wav: A0 [4000, 12000), A1 [16000, 24000), A2 [28000, 40000); b.wav: B0 [8000, 16000), B1 [20000, 32000)
ROWS = [
    {"id": "A0", "wav": "/talks/a.wav", "offset": "0.25", "duration": "0.5", "speaker": "ann"},
    {"id": "B0", "wav": "/talks/b.wav", "offset": "0.5", "duration": "0.5", "speaker": "bob"},
    {"id": "A2", "wav": "/talks/a.wav", "offset": "1.75", "duration": "0.75", "speaker": "ann"},
    {"id": "A1", "wav": "/talks/a.wav", "offset": "1.0", "duration": "0.5", "speaker": "ann"},
    {"id": "B1", "wav": "/talks/b.wav", "offset": "1.25", "duration": "0.75", "speaker": "bob"},
]


def _plan(spans):
    return [([ROWS[i]["id"] for i in s.rows], s.n_samples) for s in spans]


def test_spans_of_a_hand_built_manifest():
    """Span lengths are drawn from 1..3 by the seed's generator: seed 3 draws 2, 1, 3, seed 6 draws 3, 3, 2.
    Talk a in speaking order is A0 A1 A2, talk b is B0 B1; no span crosses a talk, and a span with the
    recording's own gaps is one piece of it (A0+A1: 4000..24000 = 20000 samples, the 4000-sample gap
    included). Seed 3: [A0 A1] [A2] [B0 B1] (the draw 3 is cut at the talk's end); seed 6: [A0 A1 A2]
    [B0 B1]; seed 6 with max_frames=150: A0 A1 A2 would be 36000 samples = 223 frames, so that span stops at
    A0 A1 (123 frames) and A2 takes the next draw; B0 B1 (24000 samples, 148 frames) fits."""
    assert _plan(plan_spans(ROWS, 3, seed=3)) == [(["A0", "A1"], 20000), (["A2"], 12000), (["B0", "B1"], 24000)]
    assert _plan(plan_spans(ROWS, 3, seed=6)) == [(["A0", "A1", "A2"], 36000), (["B0", "B1"], 24000)]
    assert _plan(plan_spans(ROWS, 3, seed=6, max_frames=150)) == [
        (["A0", "A1"], 20000), (["A2"], 12000), (["B0", "B1"], 24000)]
    assert _plan(plan_spans(ROWS, 1, seed=6)) == [(["A0"], 8000), (["A1"], 8000), (["A2"], 12000), (["B0"], 8000),
                                                  (["B1"], 12000)]
    assert plan_spans(ROWS, 3, seed=3) == plan_spans(ROWS, 3, seed=3)  # a function of the seed
    assert all(s.pause_samples is None for s in plan_spans(ROWS, 3, seed=3))


def test_sampled_pauses_and_what_cannot_be_joined():
    """With pauses drawn from 100..300 ms every span's length is its parts plus its pauses (1600..4800
    samples each), and a span still never crosses a talk. With the recording's own gaps two utterances are
    not joined when the second starts before the first ends, or (grouped by speaker) lies in another
    recording; sampled pauses join both."""
    for seed in range(6):
        spans = plan_spans(ROWS, 3, seed=seed, pause_ms=[100.0, 300.0])
        for s in spans:
            parts = [8000 if ROWS[i]["id"] in ("A0", "A1", "B0") else 12000 for i in s.rows]
            assert len(s.pause_samples) == len(s.rows) - 1 and all(1600 <= p <= 4800 for p in s.pause_samples)
            assert s.n_samples == sum(parts) + sum(s.pause_samples)
            assert len({ROWS[i]["wav"] for i in s.rows}) == 1
        assert sorted(i for s in spans for i in s.rows) == [0, 1, 2, 3, 4]
    overlap = [{"id": "x", "wav": "/t.wav", "offset": "0.0", "duration": "1.0", "speaker": "s"},
               {"id": "y", "wav": "/t.wav", "offset": "0.9", "duration": "1.0", "speaker": "s"}]
    clips = [{"id": "u", "wav": "/u.wav", "offset": "0", "duration": "1.0", "speaker": "s"},
             {"id": "v", "wav": "/v.wav", "offset": "0", "duration": "1.0", "speaker": "s"}]
    for rows, group in ((overlap, "talk"), (clips, "speaker")):
        for seed in range(4):
            assert [s.rows for s in plan_spans(rows, 2, seed=seed, group=group)] == [(0,), (1,)]
        assert any(s.rows == (0, 1) for seed in range(4)
                   for s in plan_spans(rows, 2, seed=seed, group=group, pause_ms=[0.0, 0.0]))
    with pytest.raises(ValueError, match="utterance A1: field 'offset' is 'soon'"):
        plan_spans([*ROWS[:3], {**ROWS[3], "offset": "soon"}], 2, seed=0)


def test_join_texts():
    assert join_texts(["Das Kind lacht.", " Der Hund bellt. "], "de") == "Das Kind lacht. Der Hund bellt."
    assert join_texts(["子供は笑います。", "犬は吠えます。"], "ja") == "子供は笑います。犬は吠えます。"
    assert join_texts(["Das Kind lacht.", ""], "de") is None  # no target rather than a misaligned one


@pytest.fixture(scope="module")
def talks_data(tmp_path_factory):
    """A DATA dir prepared by mmst-prep-multiway (in this process) from a tiny MuST-C-layout corpus: train =
    talk ted_1 (3 segments) and ted_2 (2 segments), tones separated by 0.3 s of digital silence."""
    from conftest import write_tiny_mustc
    from fixtures_data import data_prep_main

    root = tmp_path_factory.mktemp("spans_data")
    segs = write_tiny_mustc(root / "raw", talks={"train": [("ted_1", 3), ("ted_2", 2)], "dev": [("ted_3", 2)]})
    assert data_prep_main("prep_multiway")(["--mustc-root", str(root / "raw"), "--out", str(root / "data"),
                                            "--splits", "train,dev", "--no-progress"]) == 0
    return root / "data", segs


def test_span_items_join_audio_and_targets(talks_data):
    """The items of seed 3's plan over the 5 prepared utterances ([ted_1 0 1] [ted_1 2] [ted_2 0 1]): a joined
    span's audio is its recording from the first utterance's start to the last one's end (parts plus the
    real 0.3 s gap), its features are that audio's fbank frames, its targets the joined sentences; a span of
    one utterance is the dataset's own item. With sampled pauses the audio is the parts with digital silence
    between them."""
    from mmst.audio import load_audio
    from mmst.data.dataset import MultiwayDataset
    from mmst.features import num_frames

    data, segs = talks_data
    base = MultiwayDataset(data, "train", with_src=True)
    spans = plan_spans(base.rows, 3, seed=3)
    assert [[base.rows[i]["id"] for i in s.rows] for s in spans] == [
        ["ted_1_0", "ted_1_1"], ["ted_1_2"], ["ted_2_0", "ted_2_1"]]
    ds = SpanDataset(base, spans)
    (t0, o0, d0), (t1, o1, d1) = segs["train"][:2]
    wav = base.rows[spans[0].rows[0]]["wav"]
    want = load_audio(wav)[int(round(o0 * 16000)):int(round((o1 + d1) * 16000))]
    x = ds.waveform(0)
    assert x.size == round(d0 * 16000) + round(0.3 * 16000) + round(d1 * 16000) == spans[0].n_samples
    np.testing.assert_array_equal(x, want)
    item = ds[0]
    assert item["id"] == "ted_1_0+ted_1_1" and item["fbank"].shape == (num_frames(x.size), 80)
    assert ds.n_frames.tolist() == [num_frames(spans[0].n_samples), base.n_frames[spans[1].rows[0]],
                                    num_frames(spans[2].n_samples)]
    for lang in ("de", "es"):
        texts = [base.rows[i][f"tgt_text_{lang}"] for i in spans[0].rows]
        assert item["tokens"][lang] == base.tgt_vocabs[lang].encode(" ".join(texts))
    assert item["src_tokens"] == base.src_vocab.encode(" ".join(base.rows[i]["src_text"] for i in spans[0].rows))
    single = ds[1]
    assert single["index"] == 1 and single["id"] == "ted_1_2"
    assert np.array_equal(single["fbank"].numpy(), base[spans[1].rows[0]]["fbank"].numpy())
    paused = SpanDataset(base, plan_spans(base.rows, 3, seed=3, pause_ms=[200.0, 200.0]))
    s = paused.spans[0]
    parts = [load_audio(base.rows[i]["wav"], float(base.rows[i]["offset"]), float(base.rows[i]["duration"]))
             for i in s.rows]
    x = paused.waveform(0)
    assert s.pause_samples == (3200,) * (len(s.rows) - 1)
    assert x.size == sum(p.size for p in parts) + 3200 * (len(s.rows) - 1) == s.n_samples
    np.testing.assert_array_equal(x[:parts[0].size], parts[0])
    assert not x[parts[0].size:parts[0].size + 3200].any()


def test_edge_silences_leave_the_plan_and_pad_each_span(talks_data):
    """With edges drawn from 50..250 ms, each span (a single utterance too) gets silence before and after
    (800..4000 samples each), its length counts them, and its parts and joins are those of the plan without
    edges (the edges draw from a generator of their own); the items are the same audio with exact zeros at
    both ends, and a single utterance is no longer the stored item but its padded audio's fbank."""
    from mmst.data.dataset import MultiwayDataset
    from mmst.features import num_frames

    for seed in range(4):
        plain = plan_spans(ROWS, 3, seed=seed, pause_ms=[100.0, 300.0])
        edged = plan_spans(ROWS, 3, seed=seed, pause_ms=[100.0, 300.0], edge_ms=[50.0, 250.0])
        assert [(s.rows, s.pause_samples) for s in edged] == [(s.rows, s.pause_samples) for s in plain]
        for p, e in zip(plain, edged):
            assert p.edge_samples is None and all(800 <= x <= 4000 for x in e.edge_samples)
            assert e.n_samples == p.n_samples + sum(e.edge_samples)
        assert edged == plan_spans(ROWS, 3, seed=seed, pause_ms=[100.0, 300.0], edge_ms=[50.0, 250.0])
    fixed = plan_spans(ROWS, 1, seed=0, edge_ms=[100.0, 100.0])
    assert [s.edge_samples for s in fixed] == [(1600, 1600)] * 5
    with pytest.raises(ValueError, match="edge_ms must be"):
        plan_spans(ROWS, 2, seed=0, edge_ms=[200.0, 100.0])

    data, _ = talks_data
    base = MultiwayDataset(data, "train", with_src=True)
    plain = SpanDataset(base, plan_spans(base.rows, 3, seed=3))
    ds = SpanDataset(base, plan_spans(base.rows, 3, seed=3, edge_ms=[100.0, 200.0]))
    for k, span in enumerate(ds.spans):
        a, b = span.edge_samples
        x, y = ds.waveform(k), plain.waveform(k)
        assert x.size == a + y.size + b == span.n_samples
        assert not x[:a].any() and not x[x.size - b:].any()
        np.testing.assert_array_equal(x[a:a + y.size], y)
        assert ds.n_frames[k] == num_frames(span.n_samples)
    single = ds[1]  # [ted_1_2] alone: its padded audio's features, its own targets
    assert single["id"] == "ted_1_2" and single["fbank"].shape == (num_frames(ds.spans[1].n_samples), 80)
    stored = base[ds.spans[1].rows[0]]
    assert single["tokens"] == stored["tokens"] and single["src_tokens"] == stored["src_tokens"]


@pytest.mark.parametrize("arch", ["unified", "separate"])
def test_training_on_spans_under_multi_k(talks_data, tmp_path, arch):
    """mmst-train's trainer with data.concat_utterances=3 and waitk_lagging=[1,2]: the batches hold the
    spans (ids joined by '+'), each language's target is the joined sentences' tokens then EOS, and two
    updates run with a finite loss, for the unified and the separate decoder."""
    import torch

    from mmst.training.config import load_config
    from mmst.training.trainer import build_trainer

    data, _ = talks_data
    cfg = load_config(None, [
        "num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "valid.interval_updates=0",
        "optim.max_update=2", "optim.warmup_updates=1", "waitk_lagging=[1,2]", f"model.arch={arch}",
        "data.concat_utterances=3", "data.max_tokens=2000", "seed=3", "model.overrides.d_model=32",
        "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1", "model.overrides.ffn_dim=32",
        "model.overrides.conv_channels=16", "model.overrides.attention_heads=2"])
    tr = build_trainer(cfg, data, tmp_path)
    ds = tr.train_iter.dataset
    assert isinstance(ds, SpanDataset) and len(ds) == 3
    batch = tr.train_iter.next_batch()
    assert sorted(batch.ids) == ["ted_1_0+ted_1_1", "ted_1_2", "ted_2_0+ted_2_1"]
    b = batch.ids.index("ted_2_0+ted_2_1")
    k = [ds.span_id(j) for j in range(len(ds))].index("ted_2_0+ted_2_1")
    for lang in ("de", "es"):
        want = ds.base.tgt_vocabs[lang].encode(ds.texts(k, f"tgt_text_{lang}", lang)) + [2]
        row = batch.target[lang][b]
        assert row[row != 1].tolist() == want
    state = tr.train()
    assert state.num_updates == 2
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())


def test_config_refuses_what_spans_cannot_do(talks_data, tmp_path):
    """A bad pause range and speed perturbation (features only) are refused with the key's name; a DATA whose
    audio is gone stops before training, naming the utterance and its wav."""
    import shutil

    from mmst.training.config import ConfigError, load_config
    from mmst.training.trainer import build_trainer

    with pytest.raises(ConfigError, match=r"data.concat_pause_ms: expected \[lo, hi\]"):
        load_config(None, ["data.concat_pause_ms=[300, 100]"])
    with pytest.raises(ConfigError, match=r"data.concat_edge_ms: expected \[lo, hi\]"):
        load_config(None, ["data.concat_edge_ms=[300]"])
    with pytest.raises(ConfigError, match="data.augment.speed_perturb"):  # edges read the audio too
        load_config(None, ["data.concat_edge_ms=[0, 100]", "data.augment.speed_perturb=[0.9, 1.0, 1.1]"])
    with pytest.raises(ConfigError, match="data.augment.speed_perturb"):
        load_config(None, ["data.concat_utterances=2", "data.augment.speed_perturb=[0.9, 1.0, 1.1]"])
    data, _ = talks_data
    moved = tmp_path / "data"
    shutil.copytree(data, moved)
    rows = (moved / "train.tsv").read_text().replace("/raw/", "/raw_gone/")
    (moved / "train.tsv").write_text(rows)
    cfg = load_config(None, ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false",
                             "data.concat_utterances=3", "seed=3", "model.overrides.d_model=32",
                             "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1",
                             "model.overrides.attention_heads=2"])
    with pytest.raises(FileNotFoundError, match=r"train.tsv: utterance ted_1_0: wav '.*raw_gone.*' is not a file"):
        build_trainer(cfg, moved, tmp_path / "run")


def test_edges_alone_make_span_items_of_single_utterances(talks_data, tmp_path):
    """data.concat_edge_ms with concat_utterances 1: every training item is one utterance with edge silences
    (a span dataset of single utterances), each with its own drawn edges."""
    from mmst.training.config import load_config
    from mmst.training.trainer import build_trainer

    data, _ = talks_data
    cfg = load_config(None, [
        "num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "valid.interval_updates=0",
        "optim.max_update=1", "data.concat_edge_ms=[100, 300]", "data.max_tokens=2000", "seed=3",
        "model.overrides.d_model=32", "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1",
        "model.overrides.ffn_dim=32", "model.overrides.conv_channels=16", "model.overrides.attention_heads=2"])
    ds = build_trainer(cfg, data, tmp_path).train_iter.dataset
    assert isinstance(ds, SpanDataset) and len(ds) == len(ds.base.rows)
    assert all(len(s.rows) == 1 and all(1600 <= x <= 4800 for x in s.edge_samples) for s in ds.spans)
