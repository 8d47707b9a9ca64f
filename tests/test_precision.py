"""Tests for the training precision (``precision: auto|fp32|bf16``) and the AdamW implementation option.

bf16 autocast on CPU must (a) really run the model's matmuls in bf16, (b) keep the loss and the
weights in fp32, and (c) train to about the same loss as fp32. The optimiser implementations must give
the same update up to rounding, and a resumed run must use the configured implementation.
"""

from __future__ import annotations

import pytest
import torch

from mmst.training.config import ConfigError, load_config
from mmst.training.optim import build_optimizer, set_optimizer_implementation
from mmst.training.step import autocast_dtype, compute_loss
from mmst.training.trainer import build_trainer

TINY = ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "data.max_tokens=1500",
        "optim.warmup_updates=5", "valid.bleu_subset=0", "valid.interval_updates=0", "model.overrides.d_model=48",
        "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1", "model.overrides.ffn_dim=64",
        "model.overrides.conv_channels=48", "model.overrides.attention_heads=2"]


def test_autocast_dtype_rules():
    assert autocast_dtype("cpu", "auto") is None
    assert autocast_dtype("cuda", "auto") is torch.bfloat16
    assert autocast_dtype("cpu", "bf16") is torch.bfloat16
    assert autocast_dtype("cuda", "fp32") is None
    with pytest.raises(ValueError, match="precision must be one of"):
        autocast_dtype("cpu", "fp16")
    with pytest.raises(ConfigError, match="precision"):
        load_config(None, ["precision=fp16"])


def test_bf16_forward_runs_matmuls_in_bf16_and_loss_in_fp32(tiny_feature_data, tmp_path):
    tr = build_trainer(load_config(None, [*TINY, "optim.max_update=1"]), tiny_feature_data, tmp_path)
    it = tr.train_iter
    b = it.collate_fn([it.dataset[i] for i in it.batches_for_epoch(1)[0]])
    seen: list[torch.dtype] = []
    hook = tr.model.register_forward_hook(lambda m, i, o: seen.append(next(iter(o.logits.values())).dtype))
    try:
        loss32, _ = compute_loss(tr.model, b, tr.criterion, 3, precision="fp32")
        loss16, _ = compute_loss(tr.model, b, tr.criterion, 3, precision="bf16")
    finally:
        hook.remove()
    assert seen == [torch.float32, torch.bfloat16]  # the decoder logits come out of bf16 matmuls
    assert loss16.dtype == torch.float32 and torch.isfinite(loss16)
    assert loss16.item() != loss32.item()  # really a different computation ...
    assert abs(loss16.item() - loss32.item()) / loss32.item() < 0.02  # ... but the same loss to bf16 precision
    assert all(p.dtype == torch.float32 for p in tr.model.parameters())


def test_bf16_training_tracks_fp32(tiny_feature_data, tmp_path):
    losses, start = {}, {}
    for prec in ("fp32", "bf16"):
        tr = build_trainer(load_config(None, [*TINY, "optim.max_update=12", f"precision={prec}", "optim.lr=3e-3"]),
                           tiny_feature_data, tmp_path / prec)
        assert tr.strategy.precision == prec
        start[prec] = tr.validator.run(tr.model)["loss"]
        tr.train()
        losses[prec] = tr.validator.run(tr.model)["loss"]
    assert start["bf16"] == pytest.approx(start["fp32"], rel=0.01)  # same seed, same initial model
    # 12 updates move the dev loss well away from its initial value ...
    for prec in ("fp32", "bf16"):
        assert losses[prec] < 0.9 * start[prec], (prec, start[prec], losses[prec])
    # ... and both precisions land together, far closer than the distance travelled
    assert abs(losses["bf16"] - losses["fp32"]) < 0.01 * losses["fp32"], losses
    assert abs(losses["bf16"] - losses["fp32"]) < 0.1 * (start["fp32"] - losses["fp32"]), (start, losses)


@pytest.mark.parametrize("impl", ["foreach", "for-loop"])
def test_fused_adamw_matches_other_implementations(impl):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    other = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    other.load_state_dict(ref.state_dict())
    opts = [build_optimizer(ref.parameters(), 1e-2, [0.9, 0.98], weight_decay=1e-2, implementation="fused"),
            build_optimizer(other.parameters(), 1e-2, [0.9, 0.98], weight_decay=1e-2, implementation=impl)]
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    for _ in range(5):
        for m, o in zip((ref, other), opts):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    start = dict(zip(ref.state_dict(), ref.state_dict().values()))
    for k, v in other.state_dict().items():
        torch.testing.assert_close(start[k], v, rtol=1e-5, atol=1e-6)
    assert opts[0].param_groups[0]["fused"] is True


def test_optimizer_implementation_is_validated_and_reapplied_after_load():
    p = [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match="implementation"):
        build_optimizer(p, 1e-3, [0.9, 0.98], implementation="sgd")
    old = build_optimizer(p, 1e-3, [0.9, 0.98], implementation="for-loop")
    new = build_optimizer(p, 1e-3, [0.9, 0.98], implementation="fused")
    new.load_state_dict(old.state_dict())
    assert new.param_groups[0]["fused"] is False  # load_state_dict restored the checkpoint's flags
    set_optimizer_implementation(new, "fused")
    assert new.param_groups[0]["fused"] is True and new.param_groups[0]["foreach"] is False


def test_bf16_on_cpu_without_native_bf16_warns(tiny_feature_data, tmp_path, monkeypatch, caplog):  # noqa: F811
    """The capability check is mocked: without native bf16, precision=bf16 on CPU warns and names fp32;
    with it (or for fp32 / CUDA) nothing is said."""
    import mmst.training.step as step

    monkeypatch.setattr(step, "cpu_has_native_bf16", lambda: False)
    msg = step.bf16_warning("cpu", "bf16")
    assert msg and "without native bf16" in msg and "--precision fp32" in msg
    assert step.bf16_warning("cpu", "fp32") is None and step.bf16_warning("cpu", "auto") is None
    assert step.bf16_warning("cuda", "bf16") is None
    caplog.set_level("WARNING")
    build_trainer(load_config(None, [*TINY, "optim.max_update=1", "precision=bf16"]), tiny_feature_data, tmp_path / "a")
    assert "without native bf16" in caplog.text
    caplog.clear()
    monkeypatch.setattr(step, "cpu_has_native_bf16", lambda: True)
    assert step.bf16_warning("cpu", "bf16") is None
    build_trainer(load_config(None, [*TINY, "optim.max_update=1", "precision=bf16"]), tiny_feature_data, tmp_path / "b")
    assert "without native bf16" not in caplog.text


def test_cpu_bf16_flags_parsed(monkeypatch, tmp_path):
    import builtins

    import mmst.training.step as step

    real_open = builtins.open
    for flags, want in (("fpu avx2 fma", False), ("avx2 avx512f avx512_bf16", True), ("fp asimd bf16", True)):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open",
                            lambda p, *a, _info=info, **k: real_open(_info if p == "/proc/cpuinfo" else p, *a, **k))
        assert step.cpu_has_native_bf16() is want, flags
        monkeypatch.setattr(builtins, "open", real_open)
