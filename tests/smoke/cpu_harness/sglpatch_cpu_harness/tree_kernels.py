"""Reference Python implementations of SGLang's CUDA-only EAGLE tree kernels (CPU harness, test-only).

SGLang 0.5.9 builds and verifies the speculative token tree with two ``sgl_kernel`` CUDA kernels that
have no CPU version: ``build_tree_kernel_efficient`` (``srt/speculative/eagle_utils.py``) and
``verify_tree_greedy`` (``eagle_utils.verify_tree_greedy_func``; on CPU that function silently does
nothing). These functions take the same arguments, fill the same output tensors in place and follow
the same rules, written as plain loops so they can be checked by hand. Only the ``FULL_MASK`` tree
mask mode (the one ``eagle_worker.py`` uses) is implemented.

Conventions (per request ``b`` of ``bs``; ``n = draft_token_num``, draft position 0 is the verified
token, positions ``1..n-1`` the selected draft tokens):

- ``selected_index[b, p-1]`` is the index of draft position ``p`` in the flattened score list of the
  draft steps; ``selected_index // topk`` names the tree node it was expanded from, and
  ``parent_list[b, node]`` is that node's own index in the score list (node 0 is the root).
- ``tree_mask`` (bool, flat) holds one row of ``seq_len[b] + n`` columns per draft position, requests
  one after the other: columns ``< seq_len`` are the prefix (left as the caller filled them, True),
  column ``seq_len + q`` says whether the token may attend to draft position ``q`` (itself, its
  ancestors and the root).
- ``positions[b*n + p] = seq_len[b] + depth(p)``.
- ``retrive_index[b, p] = b*n + p``; ``retrive_next_token[b, p]`` is ``p``'s first child and
  ``retrive_next_sibling[b, p]`` its next sibling (-1: none), children in ascending position order.
"""

from __future__ import annotations

import warnings

FULL_MASK = 0


def _parent_position(selected: list[int], parents: list[int], topk: int, pos: int) -> int | None:
    """Draft position of the parent of draft position ``pos`` (0 = root), None if not selected."""
    node = selected[pos - 1] // topk
    if node == 0:
        return 0
    parent_token = parents[node]
    for q, sel in enumerate(selected):
        if sel == parent_token:
            return q + 1
    return None


def build_tree_kernel_efficient(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    if int(tree_mask_mode) != FULL_MASK:
        raise NotImplementedError(
            f"CPU harness: tree mask mode {int(tree_mask_mode)} (only FULL_MASK = 0 is implemented)"
        )
    n = draft_token_num
    seq_lens = [int(x) for x in verified_seq_len.tolist()]
    bs = len(seq_lens)
    selected_all = selected_index.reshape(bs, n - 1).tolist()
    parents_all = parent_list.reshape(bs, -1).tolist() if parent_list.numel() else [[] for _ in range(bs)]
    mask = tree_mask.tolist()
    pos_out = positions.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sib = retrive_next_sibling.tolist()

    offset = 0  # start of request b's rows in the flat mask
    for b in range(bs):
        seq_len = seq_lens[b]
        selected, parents = selected_all[b], parents_all[b]
        width = seq_len + n
        parent_of = {p: _parent_position(selected, parents, topk, p) for p in range(1, n)}

        for p in range(n):
            row = offset + width * p
            mask[row + seq_len] = True  # the root (verified token)
            for q in range(1, n):
                mask[row + seq_len + q] = False
            if p == 0:
                pos_out[b * n] = seq_len
                continue
            depth_p, cur = 0, p
            while cur not in (0, None):
                depth_p += 1
                mask[row + seq_len + cur] = True
                cur = parent_of[cur]
            if cur is None:
                warnings.warn(
                    "CPU harness: invalid EAGLE tree, a draft token's parent was not selected (NaN logprobs?)"
                )
            pos_out[b * n + p] = seq_len + depth_p

        for p in range(n - 1, 0, -1):
            r_index[b][p] = b * n + p
            parent = parent_of[p]
            if parent is None:
                continue
            if r_next[b][parent] != -1:
                r_sib[b][p] = r_next[b][parent]
            r_next[b][parent] = p
        r_index[b][0] = b * n
        offset += width * n

    for out, values in (
        (tree_mask, mask),
        (positions, pos_out),
        (retrive_index, r_index),
        (retrive_next_token, r_next),
        (retrive_next_sibling, r_sib),
    ):
        out.copy_(out.new_tensor(values))


def verify_tree_greedy(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
) -> None:
    """Greedy tree verification: walk down from the root, at each level accept the first child
    (in sibling order) whose draft token equals the target's prediction at the last accepted node.

    Outputs: ``accept_index[b, :k+1]`` the flat indices of the root and the k accepted tokens,
    ``accept_token_num[b] = k``, ``predicts[i]`` the token emitted at each accepted node (the next
    accepted draft token, and at the last one the target's own prediction, the bonus token).
    """
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    cand = candidates.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sib = retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    pred = predicts.tolist()
    acc_index = accept_index.tolist()
    acc_num = accept_token_num.tolist()

    for b in range(bs):
        last = r_index[b][0]
        acc_index[b][0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = r_next[b][cur]
            while cur != -1:
                if cand[b][cur] == target[last]:
                    pred[last] = cand[b][cur]
                    accepted += 1
                    acc_index[b][accepted] = r_index[b][cur]
                    last = r_index[b][cur]
                    break
                cur = r_sib[b][cur]
            if cur == -1:
                break
        acc_num[b] = accepted
        pred[last] = target[last]

    for out, values in ((predicts, pred), (accept_index, acc_index), (accept_token_num, acc_num)):
        out.copy_(out.new_tensor(values))
