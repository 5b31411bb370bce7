from __future__ import annotations

import contextlib
import dataclasses
import math

import pytest
import torch

from trainers import Recipe, Transformer, preset, train
from trainers.nn import attention
from trainers.nn.mup import param_groups

BUDGET = 8192  # 64 sequences of 128 tokens: a couple of seconds on one core


@pytest.fixture(scope="module")
def debug_args():
    return preset("debug")


def run(args, recipe, **kw):
    """train() with a small fixed validation set: evaluations dominate such short runs."""
    return train(args, recipe, **{"eval_sequences": 16, "device": "cpu", **kw})


def quick(**kw) -> Recipe:
    base = dict(batch_schedule="constant", batch_start=8, batch_end=8, precision="fp32")
    return Recipe(**{**base, **kw})


def test_same_seed_fp32_gives_identical_curves(debug_args):
    """Four steps of four sequences: enough for init, data order and the optimizer's updates
    to show in every point of the curve, and a run of well under a second."""
    r, tokens = quick(batch_start=4, batch_end=4), 4 * 4 * 128
    a, b, c = (run(debug_args, r, token_budget=tokens, seed=seed, eval_sequences=4)
               for seed in (1, 1, 2))
    assert len(a.train_curve) == 4
    assert a.train_curve == b.train_curve and a.val_loss == b.val_loss
    assert all(x != z for x, z in zip(a.train_curve, c.train_curve, strict=True))


@pytest.mark.parametrize("schedule", ["constant", "linear", "step"])
def test_every_batch_schedule_consumes_exactly_the_budget(debug_args, schedule):
    r = quick(batch_schedule=schedule, batch_start=2, batch_end=8, batch_ramp_fraction=0.5)
    res = run(debug_args, r, token_budget=BUDGET + 100)  # rounds down to whole sequences
    assert res.tokens_trained == BUDGET == res.token_budget
    assert res.train_curve[-1][0] == BUDGET


def test_batch_schedule_changes_steps_not_data(debug_args):
    const = run(debug_args, quick(), token_budget=BUDGET)
    ramp = run(debug_args, quick(batch_schedule="linear", batch_start=2, batch_end=8,
                                   batch_ramp_fraction=0.5), token_budget=BUDGET)
    assert const.steps == BUDGET // (8 * 128)
    assert ramp.steps > const.steps


def test_training_reduces_validation_loss(debug_args):
    res = run(debug_args, quick(lr=3e-3), token_budget=4 * BUDGET, eval_every_tokens=BUDGET)
    assert len(res.eval_curve) == 4
    assert res.eval_curve[-1][1] < res.eval_curve[0][1] < math.log(256)
    assert res.tokens_per_s > 0 and res.peak_memory_method == "cpu_accounting"
    assert res.peak_memory_bytes > res.activation_bytes > 0


def test_checkpointing_same_loss_and_grads_fewer_activation_bytes(tiny_args):
    model = Transformer(tiny_args).train()
    tokens = torch.randint(0, 256, (4, 33))
    from trainers.memory import SavedActivationMeter

    results = {}
    for ratio in (0.0, 1.0):
        model.zero_grad()
        model.set_checkpointing(ratio)
        meter = SavedActivationMeter(model)
        with meter.measure():
            out = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1),
                                                     tokens[:, 1:].flatten())
            loss = loss + out.balance_loss * 1e-4
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results[ratio] = (loss.item(), grads, meter.last_bytes)
    (l0, g0, m0), (l1, g1, m1) = results[0.0], results[1.0]
    assert l0 == pytest.approx(l1, rel=1e-6)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert m1 < 0.5 * m0


def test_activation_bytes_fall_with_checkpoint_ratio(debug_args):
    measured = [run(debug_args, quick(checkpoint_ratio=r), token_budget=2048).activation_bytes
                for r in (0.0, 1.0)]
    assert measured[1] < measured[0]


def test_divergence_is_a_result_not_an_exception(debug_args):
    res = run(debug_args, quick(lr=1e3, warmup_fraction=0.0, grad_clip=0.0),
                token_budget=4 * BUDGET)
    assert res.diverged and res.diverged_step is not None
    assert res.val_loss == math.inf
    assert res.tokens_trained < 4 * BUDGET


def test_on_eval_can_stop_the_run(debug_args):
    seen = []

    def on_eval(tokens, metrics):
        seen.append((tokens, metrics["val_loss"]))
        return "stop"

    res = run(debug_args, quick(), token_budget=BUDGET, eval_every_tokens=2048,
                on_eval=on_eval)
    assert res.stopped_early and len(seen) == 1
    assert res.tokens_trained == seen[0][0] < BUDGET


def test_precisions_run_and_label_fp8_as_emulated(debug_args):
    results = {p: run(debug_args, quick(precision=p), token_budget=2048)
               for p in ("fp32", "bf16", "fp8")}
    assert results["fp8"].fp8_emulated is True and results["bf16"].fp8_emulated is None
    assert "emulated" in results["fp8"].environment["fp8_backend"]
    # every result says which attention core ran (short sequences on CPU: one of our kernels)
    expected = attention.describe("cpu", quick().seq_len)
    assert expected.startswith(("fused CPU kernel", "blocked CPU kernel"))
    assert all(r.environment["attention"] == expected for r in results.values())
    for p in ("bf16", "fp8"):  # low precision changes the numbers a little, not the outcome
        assert results[p].val_loss == pytest.approx(results["fp32"].val_loss, rel=0.02)
        assert results[p].val_loss != results["fp32"].val_loss


def test_mtp_loss_weight_changes_training_but_not_val_definition(debug_args):
    off = run(debug_args, quick(mtp_lambda=0.0), token_budget=2048)
    on = run(debug_args, quick(mtp_lambda=1.0), token_budget=2048)
    no_mtp = run(dataclasses.replace(debug_args, mtp_depth=0), quick(), token_budget=2048)
    assert off.train_curve[0] == pytest.approx(on.train_curve[0])  # main CE before any update
    assert off.val_loss != on.val_loss
    assert no_mtp.n_params < off.n_params


@pytest.mark.parametrize("policy", ["record", "skip", "rollback"])
def test_spike_policies(debug_args, policy):
    """After a flagged spike: `record` updates, `skip` leaves weights alone, `rollback` restores
    the last evaluated state."""
    from trainers.loop import SPIKE_WARMUP_STEPS, _Run

    run = _Run.start(debug_args, quick(spike_policy=policy), None, BUDGET, None, 1024, 16, "cpu")
    run.step()
    run.evaluate(None)  # rollback snapshot taken here
    snap = [p.detach().clone() for p in run.model.parameters()]
    run.step()
    before = [p.detach().clone() for p in run.model.parameters()]
    run.steps, run.loss_ema = SPIKE_WARMUP_STEPS + 1, 0.01  # any real loss is now a spike
    run.step()
    after = list(run.model.parameters())
    assert run.spike_steps == [SPIKE_WARMUP_STEPS + 2]
    changed = any(not torch.equal(a, b) for a, b in zip(before, after))
    assert changed == (policy != "skip")
    if policy == "rollback":
        assert all(torch.equal(a, b) for a, b in zip(snap, after))


def test_bad_train_arguments(debug_args):
    with pytest.raises(ValueError, match="token_budget must be a positive integer"):
        run(debug_args, quick(), token_budget=0)
    with pytest.raises(ValueError, match="at least one sequence"):
        run(debug_args, quick(), token_budget=100)
    with pytest.raises(ValueError, match="eval_every_tokens"):
        run(debug_args, quick(), token_budget=BUDGET, eval_every_tokens=-5)
    with pytest.raises(ValueError, match="vocab_size=256, larger than ModelArgs.vocab_size=100"):
        run(dataclasses.replace(debug_args, vocab_size=100), quick(), token_budget=BUDGET)


def test_mup_scales_hidden_lr_and_init(tiny_args):
    wide = dataclasses.replace(tiny_args, mup_base_dim=16)  # width_mult = 64 / 16 = 4
    groups = {g["name"]: g for g in param_groups(Transformer(wide), wide, weight_decay=0.1)}
    assert groups["hidden"]["lr_mult"] == 0.25
    assert groups["embed_head"]["lr_mult"] == 1.0 and groups["norms"]["weight_decay"] == 0.0
    torch.manual_seed(0)
    std_sp = Transformer(tiny_args).layers[0].attn.wo.weight.std().item()
    torch.manual_seed(0)
    std_mup = Transformer(wide).layers[0].attn.wo.weight.std().item()
    assert std_mup == pytest.approx(std_sp / 2, rel=0.05)


def test_command_line_run_and_bad_input(tmp_path, capsys):
    from trainers.__main__ import main

    out = tmp_path / "r.json"
    assert main(["--tokens", "2048", "--set", "precision=fp32", "--json", str(out)]) == 0
    assert "val_loss" in capsys.readouterr().out and out.exists()
    assert main(["--set", "lr=-1"]) == 2
    assert "Recipe.lr" in capsys.readouterr().err
    assert main(["--set", "learning_rate=1"]) == 2
    assert "unknown Recipe field 'learning_rate'" in capsys.readouterr().err


def test_cpu_attention_kernel_is_ready_before_the_timed_steps(debug_args):
    """A first-use build of the fused kernel must not count against a trial's tokens/s."""
    from trainers.loop import _Run
    from trainers.nn import fused_attention

    fused_attention.library.cache_clear()
    try:
        _Run.start(debug_args, quick(), None, BUDGET, 0, None, 4, "cpu")
        assert fused_attention.library.cache_info().currsize == 1  # built/loaded in setup
    finally:
        fused_attention.library.cache_clear()


def test_step_gate_is_held_around_every_step_and_evaluation_but_not_on_eval(debug_args):
    held, seen, entered = [], [], []

    @contextlib.contextmanager
    def gate():
        entered.append(1)
        held.append(True)
        yield
        held.pop()

    def on_eval(tokens, metrics):
        seen.append(bool(held))  # on_eval must run outside the gate

    res = run(debug_args, quick(), token_budget=BUDGET, eval_every_tokens=BUDGET // 2,
              on_eval=on_eval, step_gate=gate)
    assert len(entered) == res.steps + len(res.eval_curve) and seen == [False, False]
    plain = run(debug_args, quick(), token_budget=BUDGET, eval_every_tokens=BUDGET // 2)
    assert plain.train_curve == res.train_curve  # the gate changes nothing in the run


def test_step_timer_steps_the_training_loop_at_the_batch_it_is_given(debug_args):
    from trainers.loop import StepTimer

    timer = StepTimer(debug_args, quick(precision="fp8"), device="cpu")
    t = timer.step(3)
    assert t.wall_s > 0 and t.cpu_s > 0 and timer.fp8_emulated is True
    assert timer._run.tokens == 3 * 128 and timer._run.steps == 1
    timer.step(5)
    assert timer._run.tokens == 8 * 128
    assert StepTimer(debug_args, quick(), device="cpu").fp8_emulated is None
