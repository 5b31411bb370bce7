"""The head's cross-entropy a slice at a time: the plain path's loss and gradients, without the
logits held whole (trainers.nn.head_loss)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import trainers.nn.head_loss as head_loss
from trainers import Recipe, preset, train
from trainers.data import Corpus
from trainers.nn.head_loss import linear_cross_entropy


@pytest.fixture
def small_slices(monkeypatch):
    """Slices of 7 tokens at V = 1000: many slices, the last one short."""
    monkeypatch.setitem(head_loss.CHUNK_ELEMENTS, "cpu", 7 * 1000)


def plain(h, w, t, scale):
    return F.cross_entropy((h @ w.T).float() * scale, t)


def operands(n: int, dim: int = 16, vocab: int = 1000):
    """Hidden states, a head's weight (both trainable) and targets."""
    h = torch.randn(n, dim, requires_grad=True)
    return h, (0.1 * torch.randn(vocab, dim)).requires_grad_(), torch.randint(0, vocab, (n,))


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_same_loss_and_gradients_as_the_plain_cross_entropy(small_slices, scale):
    h, w, t = operands(50)
    got = {}
    for name, fn in (("plain", plain), ("sliced", linear_cross_entropy)):
        h.grad = w.grad = None
        loss = fn(h, w, t, scale)
        (0.3 * loss).backward()  # a weight on the loss reaches both gradients
        got[name] = (loss.detach(), h.grad.clone(), w.grad.clone())
    for a, b in zip(got["plain"], got["sliced"]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


def test_without_gradients_only_the_loss_is_computed(small_slices):
    h, w = torch.randn(30, 8), torch.randn(1000, 8)
    t = torch.randint(0, 1000, (30,))
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, t)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, plain(h, w, t, 1.0))


def test_under_bf16_autocast_it_stays_close_to_the_plain_path(small_slices):
    h, w, t = operands(40)
    got = {}
    for name, fn in (("plain", plain), ("sliced", linear_cross_entropy)):
        h.grad = w.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = fn(h, w, t, 1.0)
        loss.backward()
        assert h.grad.dtype == w.grad.dtype == torch.float32
        got[name] = (loss.detach().float(), h.grad.clone(), w.grad.clone())
    for a, b in zip(got["plain"], got["sliced"]):
        torch.testing.assert_close(b, a, rtol=2e-2, atol=2e-4)


def subword_corpus(vocab: int) -> Corpus:
    g = torch.Generator().manual_seed(0)
    # a skewed unigram distribution over the vocabulary: something for the proxy to learn
    ids = torch.multinomial(torch.arange(1, vocab + 1).float() ** -1.1, 40_000, True,
                            generator=g).to(torch.int32)
    return Corpus(tokens=ids, vocab_size=vocab, name="synthetic", hash="0" * 64)


def test_a_subword_proxy_trains_the_same_without_holding_its_logits(monkeypatch):
    vocab, batch, seq = 8192, 8, 128
    args = dataclasses.replace(preset("debug"), vocab_size=vocab)
    recipe = Recipe(batch_schedule="constant", batch_start=batch, batch_end=batch,
                    precision="fp32", lr=3e-3)
    data = subword_corpus(vocab)
    sliced = train(args, recipe, data=data, token_budget=4 * batch * seq, eval_sequences=8,
                   device="cpu")
    monkeypatch.setattr("trainers.nn.model.FUSED_MIN_VOCAB", vocab + 1)  # the plain path
    whole = train(args, recipe, data=data, token_budget=4 * batch * seq, eval_sequences=8,
                  device="cpu")
    assert sliced.val_loss == pytest.approx(whole.val_loss, rel=1e-4)
    logits_bytes = batch * seq * vocab * 4  # one head's fp32 logits for one step's batch
    # the plain path held the main and the MTP head's logits (or their log-softmax); the sliced
    # one keeps two gradients of (tokens x dim) and (V x dim) per head in their place
    held = 2 * (batch * seq * args.dim + vocab * args.dim) * 4
    assert whole.activation_bytes - sliced.activation_bytes >= 2 * logits_bytes - held
