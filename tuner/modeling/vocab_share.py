"""How much of a proxy is its vocabulary: the share of its parameters and of its training FLOPs
per token held by the embedding and the output head.

At a real vocabulary a small proxy is mostly embedding and head (DeepSeek-V3's 129,280 tokens
against a width of 256: 66M of the proxy's weights are those two tables), so the FLOPs, the
memory and the learning rate the proxy sees are not its blocks'. A study states the share.

    parameters  (V·d embedding + V·d head) / all parameters (`cost_model.count_params`: MTP
                excluded, as its module shares both tables)
    FLOPs       6·V·d·(1 + MTP depth) (the head's matmul, once per prediction; the embedding is
                a lookup, no FLOPs) / the model's training FLOPs per token
                (`cost_model.flops_per_token(...).model`, attention at the sequence length)

Both are *modeled* from the architecture, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainers.config.model_args import ModelArgs
from tuner.modeling.cost_model import count_params, flops_per_token


@dataclass(frozen=True, kw_only=True)
class VocabShare:
    vocab_size: int
    params: float  # embedding + head, as a fraction of all parameters
    flops: float  # the head's matmul, as a fraction of training FLOPs per token
    seq_len: int

    def sentence(self) -> str:
        """One line for a report or an export note."""
        return (f"the proxy's vocabulary is {self.vocab_size:,} tokens: embedding + head hold "
                f"{self.params:.0%} of its parameters and {self.flops:.0%} of its training "
                f"FLOPs per token (modeled, at seq_len {self.seq_len})")


def vocab_share(a: ModelArgs, seq_len: int) -> VocabShare:
    """The share of ``a``'s parameters and training FLOPs in embedding + head.

        >>> vocab_share(ModelArgs(vocab_size=256, dim=64, n_layers=2), 256).vocab_size
        256
    """
    c = count_params(a)
    head_flops = 6.0 * a.vocab_size * a.dim * (1 + a.mtp_depth)
    return VocabShare(vocab_size=a.vocab_size, params=(c.embedding + c.head) / c.total,
                      flops=head_flops / flops_per_token(a, seq_len).model, seq_len=seq_len)


def vocab_notes(proxy: ModelArgs, target: ModelArgs, seq_len: int) -> list[str]:
    """What an export says about vocabularies: the one the proxy was tuned at, its share, and
    that the full run keeps its own."""
    share = vocab_share(proxy, seq_len)
    if proxy.vocab_size == target.vocab_size:
        return [f"tuned at the full run's own vocabulary: {share.sentence()}."]
    return [f"tuned at another vocabulary than the full run's: {share.sentence()}; the full "
            f"run keeps its own {target.vocab_size:,}. What the vocabulary moves (the head's "
            "share of the FLOPs and the LR the embedding sees) was not tuned at the target's."]
