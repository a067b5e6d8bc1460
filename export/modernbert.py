"""ModernBERT's attention as its graph should compute it: local layers banded, no ``t × t`` mask anywhere.

transformers' ModernBERT (eager or SDPA; flash-attention needs a GPU) builds two ``[batch, 1, t, t]`` float masks
per call (the padding mask and the sliding-window mask) and lets every layer, local ones included, compute all
``t × t`` scores before masking those outside the 128-token window. Traced as it is, an 8,192-token input then
costs 256 MB per mask, ``heads × 256 MB`` of scores in every layer, and most of its time in building and adding
masks (the tiny test model: 22 s for one 8,192-token input on onnxruntime, against 1.6 s at 2,048).

While the export traces the model, :func:`banded_attention` swaps in an attention that computes the same
function with less: a global layer adds a ``[batch, 1, 1, t]`` key-padding bias (broadcast, never expanded); a
local layer cuts the sequence into blocks of ``window / 2`` tokens and lets each block attend to itself and
its two neighbours (``3 × window / 2`` keys), masking what lies beyond the window or in the padding. Keys outside
the window got ``finfo.min`` before, so ``exp`` gave exactly 0 for them: the softmax sums the same terms, and
the parity gate checks the result against the unchanged PyTorch model. Rotary positions, the projections and
every head are the model's own modules, run as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import PreTrainedModel
from transformers.models.modernbert import modeling_modernbert as modeling

__all__ = ["GLOBAL_QUERY_CHUNKS", "banded_attention", "banded_local_attention", "chunked_global_attention"]

#: Slices of the queries of a global layer: its scores are made (and freed) one slice at a time.
GLOBAL_QUERY_CHUNKS = 8


def _windows(blocks: torch.Tensor, dim: int) -> torch.Tensor:
    """Each block beside its two neighbours: ``[..., n + 2, B, ...]`` blocks (one of padding at each end) to
    ``[..., n, 3B, ...]`` windows, concatenated along ``dim`` (the block-content axis)."""
    return torch.cat((blocks[:, :, :-2], blocks[:, :, 1:-1], blocks[:, :, 2:]), dim=dim)


def banded_local_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, half: int, scale: float
) -> torch.Tensor:
    """Attention of each token to the keys within ``half`` positions of it (and not padding).

    Args:
        query, key, value: ``[batch, heads, t, head_dim]``.
        mask: ``[batch, t]``, 1 for a token, 0 for padding.
        half: keys at most this many positions away are seen (``local_attention // 2``).
        scale: the score scale (``head_dim ** -0.5``).

    Returns:
        ``[batch, heads, t, head_dim]``.
    """
    batch, heads, length, width = query.shape
    block = half
    pad = (block - length % block) % block
    count = (length + pad) // block
    zeros = query.new_zeros
    queries = torch.cat((query, zeros(batch, heads, pad, width)), dim=2).view(batch, heads, count, block, width)

    def windows(states: torch.Tensor) -> torch.Tensor:
        padded = torch.cat((zeros(batch, heads, block, width), states, zeros(batch, heads, pad + block, width)), dim=2)
        return _windows(padded.view(batch, heads, count + 2, block, width), dim=3)  # [b, h, n, 3B, d]

    valid = torch.cat((zeros(batch, block), mask.to(query.dtype), zeros(batch, pad + block)), dim=1)
    key_valid = _windows(valid.view(batch, 1, count + 2, block), dim=3)  # [b, 1, n, 3B]
    rows = torch.arange(block, device=query.device)[:, None]
    columns = torch.arange(3 * block, device=query.device)[None, :]
    band = (columns - block - rows).abs() <= half  # [B, 3B]: the same for every block
    allowed = band[None, None, None] & (key_valid[:, :, :, None, :] > 0)  # [b, 1, n, B, 3B]
    bias = torch.zeros_like(allowed, dtype=query.dtype).masked_fill(~allowed, torch.finfo(query.dtype).min)
    scores = torch.matmul(queries, windows(key).transpose(-1, -2)) * scale + bias
    out = torch.matmul(scores.softmax(dim=-1), windows(value))  # [b, h, n, B, d]
    return out.view(batch, heads, count * block, width)[:, :, :length]


def chunked_global_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of each token to every key, queries taken in :data:`GLOBAL_QUERY_CHUNKS` slices.

    The key-padding bias rides in the matrix product as one more dimension (queries ``[q * scale, 1]``, keys
    ``[k, bias]``), so no ``t × t`` addition is made; each slice's scores are freed before the next slice's are
    made (onnxruntime runs the nodes in this order), so a global layer holds ``heads × t × t / 8`` scores at once.

    Args:
        query, key, value: ``[batch, heads, t, head_dim]``.
        bias: ``[batch, 1, 1, t]``: 0 for a token, ``finfo.min`` for padding.
        scale: the score scale (``head_dim ** -0.5``).
    """
    batch, heads, length, width = query.shape
    slices = GLOBAL_QUERY_CHUNKS
    size = (length + slices - 1) // slices
    pad = size * slices - length
    keys = torch.cat((key, bias.transpose(-1, -2).expand(batch, heads, length, 1)), dim=-1)  # [b, h, t, d + 1]
    queries = torch.cat((query * scale, query.new_ones(batch, heads, length, 1)), dim=-1)
    queries = torch.cat((queries, queries.new_zeros(batch, heads, pad, width + 1)), dim=2)
    parts = [
        torch.matmul(torch.matmul(part, keys.transpose(-1, -2)).softmax(dim=-1), value)
        for part in queries.view(batch, heads, slices, size, width + 1).unbind(dim=2)
    ]
    return torch.cat(parts, dim=2)[:, :, :length]


def _attention(
    module: Any,
    qkv: torch.Tensor,
    attention_mask: torch.Tensor,
    sliding_window_mask: torch.Tensor,
    position_ids: torch.Tensor,
    local_attention: tuple[int, int],
    bs: int,
    dim: int,
    **_kwargs: Any,
) -> tuple[torch.Tensor]:
    """ModernBERT's attention (``eager_attention_forward``'s inputs): rotary positions, then global or banded
    attention. ``attention_mask`` is the ``[b, 1, 1, t]`` key bias, ``sliding_window_mask`` the ``[b, t]`` mask."""
    cos, sin = module.rotary_emb(qkv, position_ids=position_ids)
    query, key, value = qkv.transpose(3, 1).unbind(dim=2)  # [b, h, t, d] each
    query, key = modeling.apply_rotary_pos_emb(query, key, cos, sin)
    scale = module.head_dim**-0.5
    if local_attention == (-1, -1):
        out = chunked_global_attention(query, key, value, attention_mask, scale)
    else:
        out = banded_local_attention(query, key, value, sliding_window_mask, local_attention[0], scale)
    return (out.transpose(1, 2).contiguous().view(bs, -1, dim),)


def _masks(self: Any, attention_mask: torch.Tensor, output_attentions: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The masks :func:`_attention` takes: a ``[b, 1, 1, t]`` key bias and the ``[b, t]`` mask itself."""
    del output_attentions
    dtype = self.dtype
    bias = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    return bias, attention_mask


@contextmanager
def banded_attention(model: PreTrainedModel) -> Iterator[None]:
    """Within the block, ``model`` (any ModernBERT class) runs :func:`_attention`; outside, its own.

    Raises:
        ValueError: ``model`` uses flash-attention (padding-free, GPU only), which this does not replace.
    """
    base = model if isinstance(model, modeling.ModernBertModel) else model.model
    implementation = model.config._attn_implementation
    if implementation not in ("eager", "sdpa"):
        raise ValueError(f"ModernBERT export needs attn_implementation 'eager' or 'sdpa', got {implementation!r}")
    table = modeling.MODERNBERT_ATTENTION_FUNCTION
    own = table[implementation]
    table[implementation] = _attention
    base._update_attention_mask = _masks.__get__(base)
    try:
        yield
    finally:
        table[implementation] = own
        del base._update_attention_mask
