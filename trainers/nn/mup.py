"""µP-style parametrization so a learning rate tuned on a narrow proxy transfers across width.

Switched on by `ModelArgs.mup_base_dim` (the width the LR was tuned at); width_mult = dim / base.
What it covers (Tensor Programs V, Adam rules):
- hidden matrices (every projection inside the blocks, the experts, the gate, the MTP projection):
  init std × 1/sqrt(width_mult) (in `Transformer.reset_parameters`) and Adam LR × 1/width_mult
  (here);
- output logits × 1/width_mult (in `Transformer._logits`);
- embeddings, the output head's weights and norms: init and LR unchanged.
Not covered: attention scale stays 1/sqrt(d_head) (head dims are fixed by `shrink`, so it equals
µP's 1/d_head up to a constant); weight decay, batch size and token horizon do not transfer.
"""

from __future__ import annotations

from torch import nn

from trainers.config.model_args import ModelArgs


def param_groups(model: nn.Module, args: ModelArgs, *, weight_decay: float) -> list[dict]:
    """AdamW groups with an `lr_mult` each: µP hidden matrices, other matrices, no-decay vectors.

    The trainer sets each group's lr to schedule(tokens) × lr_mult.
    """
    hidden, other, vectors = [], [], []
    for name, p in model.named_parameters():
        if p.ndim < 2:
            vectors.append(p)
        elif name.startswith(("embed.", "head.")):
            other.append(p)
        else:
            hidden.append(p)
    groups = [
        {"params": hidden, "weight_decay": weight_decay, "lr_mult": 1.0 / args.width_mult,
         "name": "hidden"},
        {"params": other, "weight_decay": weight_decay, "lr_mult": 1.0, "name": "embed_head"},
        {"params": vectors, "weight_decay": 0.0, "lr_mult": 1.0, "name": "norms"},
    ]
    return [g for g in groups if g["params"]]
