"""Reference Python versions of ``sgl_kernel``'s CPU speculative ops (CPU harness, test-only).

Newer SGLang (seen in 0.5.23; absent in 0.5.9) sends its CPU engine (``SGLANG_USE_CPU_ENGINE=1``)
through ``sgl_kernel`` CPU ops for KV bookkeeping and the EAGLE tree: ``sgl_kernel/speculative.py``
defines Python wrappers (``assign_req_to_token_pool_cpu``, ``build_tree_kernel_efficient_cpu``, ...)
that call ``torch.ops.sgl_kernel.<name>``. Those ops exist only in sgl-kernel's CPU build; the
CUDA build that ``pip install sglang`` brings (sglang-kernel 0.4.10) ships the wrappers but not the
ops, so every call raises AttributeError (plain decoding included: ``assign_req_to_token_pool_cpu``
writes the KV slots of each extend/decode step).

Each function below follows the Triton kernel SGLang itself uses for the same job on CUDA (named
per function, in ``sglang/kernels/ops/...`` and ``sglang/srt/mem_cache/allocation.py`` of 0.5.23),
written as plain loops, and takes the wrapper's arguments. :func:`install` binds them into the
``sgl_kernel`` module for the names whose torch op is missing; callers import them from
``sgl_kernel`` after that (``from sgl_kernel import ...``), so they get the references.
"""

from __future__ import annotations

import ctypes

from . import tree_kernels


def _segments(start_offset, end_offset):
    """(b, start, end, offset in the packed buffer) per request, offsets = running sum of lengths."""
    starts = [int(x) for x in start_offset.tolist()]
    ends = [int(x) for x in end_offset.tolist()]
    offset = 0
    for b, (s, e) in enumerate(zip(starts, ends)):
        yield b, s, e, offset
        offset += e - s


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """Triton ``assign_req_to_token_pool`` (mem_cache/allocation.py): the packed ``out_cache_loc``
    slots of request b go to ``req_to_token[req_pool_indices[b], start[b]:end[b]]``."""
    rows = [int(x) for x in req_pool_indices.tolist()]
    for b, s, e, off in _segments(start_offset, end_offset):
        if e > s:
            req_to_token[rows[b], s:e] = out_cache_loc[off : off + e - s].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """Triton ``assign_extend_cache_locs`` (kernels/ops/speculative/cache_locs.py): the reverse
    gather, ``req_to_token[req_pool_indices[b], start[b]:end[b]]`` packed into ``out_cache_loc``."""
    rows = [int(x) for x in req_pool_indices.tolist()]
    for b, s, e, off in _segments(start_offset, end_offset):
        if e > s:
            out_cache_loc[off : off + e - s] = req_to_token[rows[b], s:e].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, num_steps
):
    """Triton ``assign_draft_cache_locs_contiguous`` (cache_locs.py): request b's
    ``topk * num_steps`` slots from ``seq_lens[b]`` on, copied to ``out_cache_loc[b*n:(b+1)*n]``."""
    n = topk * num_steps
    rows = [int(x) for x in req_pool_indices.tolist()]
    for b, start in enumerate(int(x) for x in seq_lens.tolist()):
        out_cache_loc[b * n : (b + 1) * n] = req_to_token[rows[b], start : start + n].to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """Triton ``fill_bonus_tokens`` (kernels/ops/speculative/eagle.py): the last accepted token of
    each request (``accept_lens`` counts the bonus token)."""
    flat = accept_tokens.reshape(-1)
    for b, n in enumerate(int(x) for x in accept_lens.tolist()):
        bonus_tokens[b] = flat[accept_stride * b + n - 1]


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    """Triton ``fill_accept_out_cache_loc`` (eagle.py): the KV slots of the accepted positions
    (``accept_index`` != -1, flattened order), packed to the front of ``accept_out_cache_loc``."""
    dst = 0
    for src in (int(x) for x in accept_index.reshape(-1).tolist()):
        if src > -1:
            accept_out_cache_loc[dst] = out_cache_loc[src]
            dst += 1


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """Triton ``copy_all_layer_kv_cache_tiled`` (kernels/ops/kvcache/cache_move.py): for every KV
    buffer (base pointer, row stride in bytes) copy row ``src_loc[i]`` to row ``tgt_loc[i]``. All
    sources are read before any target is written (the kernel's tile does the same)."""
    tgts = [int(x) for x in tgt_loc.tolist()]
    srcs = [int(x) for x in src_loc.tolist()]
    for base, stride in zip((int(x) for x in data_ptrs.tolist()), (int(x) for x in strides.tolist())):
        rows = [ctypes.string_at(base + s * stride, stride) for s in srcs]
        for t, row in zip(tgts, rows):
            ctypes.memmove(base + t * stride, row, stride)


def build_tree_kernel_efficient_cpu(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    topk,
    depth,
    draft_token_num,
    tree_mask_mode,
):
    """Same contract as the CUDA ``build_tree_kernel_efficient``: the existing reference."""
    tree_kernels.build_tree_kernel_efficient(
        parent_list,
        selected_index,
        verified_seq_len,
        tree_mask,
        positions,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
        topk,
        depth,
        draft_token_num,
        tree_mask_mode,
    )


def verify_tree_greedy_cpu(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
):
    """Same contract as the CUDA ``verify_tree_greedy``: the existing reference."""
    tree_kernels.verify_tree_greedy(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_token_num,
        candidates=candidates,
        retrive_index=retrive_index,
        retrive_next_token=retrive_next_token,
        retrive_next_sibling=retrive_next_sibling,
        target_predict=target_predict,
    )


REFERENCES = {
    f.__name__: f
    for f in (
        assign_req_to_token_pool_cpu,
        assign_extend_cache_locs_cpu,
        assign_draft_cache_locs_contiguous_cpu,
        fill_bonus_tokens_cpu,
        fill_accept_out_cache_loc_cpu,
        copy_all_layer_kv_cache_cpu,
        build_tree_kernel_efficient_cpu,
        verify_tree_greedy_cpu,
    )
}


def install(sgl_kernel, torch) -> list[str]:
    """Bind a reference for every CPU op that ``sgl_kernel`` exports but whose torch op is not
    registered (the CUDA build). Feature detection only: an sgl_kernel without the wrapper (0.5.9's
    sgl-kernel 0.3.21) or with the real op (a CPU build) is left alone. Returns the names bound."""
    bound = []
    for name, ref in REFERENCES.items():
        if not hasattr(sgl_kernel, name):
            continue
        try:
            getattr(torch.ops.sgl_kernel, name)
            continue  # the real op is there
        except (AttributeError, RuntimeError):
            pass
        ref.__wrapped__ = getattr(sgl_kernel, name)
        setattr(sgl_kernel, name, ref)
        bound.append(name)
    return bound
