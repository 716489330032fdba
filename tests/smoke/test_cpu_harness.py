"""The CPU harness on its own: each replacement checked against hand-worked cases.

The reference tree kernels replace CUDA-only ``sgl_kernel`` code in every CPU smoke test, so they
are tested here first, on small trees worked out by hand (the worked trees are in the docstrings).
The rest checks that the harness is active where SGLang looks (stub libcuda, no-op synchronize,
kernels bound where SGLang looks them up: ``eagle_utils``/``eagle_info`` on 0.5.9, ``sgl_kernel``'s
CPU ops on 0.5.23) and in SGLang's spawned processes, on every line's runtime.
"""

from __future__ import annotations

import pytest
import sglang_runtime

pytestmark = [pytest.mark.smoke]

cpu_only = pytest.mark.skipif(
    sglang_runtime.gpu_available(), reason="the CPU harness is only active on machines without a GPU"
)

# ---------------------------------------------------------------------------------------------
# build_tree_kernel_efficient

BUILD_SCRIPT = (
    sglang_runtime.emit_snippet()
    + """
import torch
from sglpatch_cpu_harness.tree_kernels import build_tree_kernel_efficient

def build(parent_list, selected_index, seq_lens, topk, depth, n):
    bs = len(seq_lens)
    mask = torch.full((sum(seq_lens) * n + n * n * bs,), True, dtype=torch.bool)
    positions = torch.empty(bs * n, dtype=torch.long)
    r_index, r_next, r_sib = torch.full((3, bs, n), -1, dtype=torch.long)
    build_tree_kernel_efficient(
        torch.tensor(parent_list, dtype=torch.long), torch.tensor(selected_index, dtype=torch.long),
        torch.tensor(seq_lens, dtype=torch.long), mask, positions, r_index, r_next, r_sib,
        topk, depth, n, 0)
    return {"mask": [int(x) for x in mask.tolist()], "positions": positions.tolist(),
            "retrive_index": r_index.tolist(), "retrive_next_token": r_next.tolist(),
            "retrive_next_sibling": r_sib.tolist()}

emit({name: build(*args) for name, args in CASES.items()})
"""
)


def rows(*bits: str) -> list[int]:
    return [int(b) for row in bits for b in row.replace(" ", "")]


BUILD_CASES = {
    # topk 1, 2 steps, 3 draft tokens, one request with 5 verified tokens: the chain root -> 1 -> 2.
    # Score list: [step-0 token, step-1 token]; both selected; parent_list [-1, 0] (node 1 is
    # score 0). Position 2's node 1//1 = 1 -> parent_list[1] = 0 = selected[0] -> position 1.
    "chain": ([[-1, 0]], [[0, 1]], [5], 1, 2, 3),
    # topk 2, 2 steps, 4 draft tokens, two requests (3 and 2 verified tokens).
    # Score list: 0,1 = step-0 children of the root; 2,3 = children of node 1 (score 0);
    # 4,5 = children of node 2 (score 1). parent_list [-1, 0, 1].
    # Request 0 selects [0, 1, 2]: root -> {1, 2}, 1 -> {3}.
    # Request 1 selects [1, 4, 5]: root -> {1}, 1 -> {2, 3}.
    "tree": ([[-1, 0, 1], [-1, 0, 1]], [[0, 1, 2], [1, 4, 5]], [3, 2], 2, 2, 4),
}

BUILD_EXPECTED = {
    "chain": {
        # one row per draft position: 5 prefix columns, then root and positions 1, 2
        "mask": rows("11111 100", "11111 110", "11111 111"),
        "positions": [5, 6, 7],
        "retrive_index": [[0, 1, 2]],
        "retrive_next_token": [[1, 2, -1]],
        "retrive_next_sibling": [[-1, -1, -1]],
    },
    "tree": {
        "mask": rows(
            "111 1000",
            "111 1100",
            "111 1010",
            "111 1101",  # request 0
            "11 1000",
            "11 1100",
            "11 1110",
            "11 1101",
        ),  # request 1
        "positions": [3, 4, 4, 5, 2, 3, 4, 4],
        "retrive_index": [[0, 1, 2, 3], [4, 5, 6, 7]],
        # next_token[p] = p's first child; next_sibling[p] = the child after p under p's parent
        "retrive_next_token": [[1, 3, -1, -1], [1, 2, -1, -1]],
        "retrive_next_sibling": [[-1, 2, -1, -1], [-1, -1, 3, -1]],
    },
}


@pytest.fixture(scope="module")
def built_trees(runtime):
    result = runtime.run(f"CASES = {BUILD_CASES!r}\n" + BUILD_SCRIPT, variant=None, harness=False, timeout=300)
    assert result.returncode == 0, result.describe()
    return result.result()


@pytest.mark.parametrize("case", sorted(BUILD_CASES))
def test_build_tree_reference_matches_hand_worked_tree(built_trees, case):
    assert built_trees[case] == BUILD_EXPECTED[case]


# ---------------------------------------------------------------------------------------------
# verify_tree_greedy

VERIFY_SCRIPT = (
    sglang_runtime.emit_snippet()
    + """
import torch
from sglpatch_cpu_harness.tree_kernels import verify_tree_greedy

# The "tree" case above: request 0 root -> {1, 2}, 1 -> {3}; request 1 root -> {1}, 1 -> {2, 3}.
R_INDEX = [[0, 1, 2, 3], [4, 5, 6, 7]]
R_NEXT = [[1, 3, -1, -1], [1, 2, -1, -1]]
R_SIB = [[-1, 2, -1, -1], [-1, -1, 3, -1]]

def verify(candidates, target_predict, steps=3):
    bs, n = len(candidates), len(candidates[0])
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, steps), -1, dtype=torch.int32)
    accept_num = torch.zeros(bs, dtype=torch.int32)
    verify_tree_greedy(predicts, accept_index, accept_num, torch.tensor(candidates),
                       torch.tensor(R_INDEX), torch.tensor(R_NEXT), torch.tensor(R_SIB),
                       torch.tensor(target_predict))
    return {"predicts": predicts.tolist(), "accept_index": accept_index.tolist(),
            "accept_num": accept_num.tolist()}

emit({name: verify(*args) for name, args in CASES.items()})
"""
)

VERIFY_CASES = {
    # Request 0 draft tokens [10, 11, 12, 13]; request 1 [20, 21, 22, 23] (position 0 = root).
    # target_predict[i] = the target's greedy token after flat node i.
    # r0: root predicts 11 = pos 1 -> accept; pos 1 predicts 13 = pos 3 -> accept; bonus 42.
    # r1: root predicts 21 = pos 1 -> accept; pos 1 predicts 23: pos 2 (22) no, sibling pos 3 yes.
    "deep": ([[10, 11, 12, 13], [20, 21, 22, 23]], [[11, 13, 99, 42], [21, 23, 98, 77]]),
    # r0: root predicts 12: pos 1 (11) no, sibling pos 2 (12) yes; pos 2 has no child: stop, bonus 7.
    # r1: root predicts 5: pos 1 (21) no, no sibling: nothing accepted, bonus 5.
    "sibling_and_none": ([[10, 11, 12, 13], [20, 21, 22, 23]], [[12, 0, 7, 0], [5, 0, 0, 0]]),
}

VERIFY_EXPECTED = {
    "deep": {
        "predicts": [11, 13, 0, 42, 21, 23, 0, 77],
        "accept_index": [[0, 1, 3], [4, 5, 7]],
        "accept_num": [2, 2],
    },
    "sibling_and_none": {
        "predicts": [12, 0, 7, 0, 5, 0, 0, 0],
        "accept_index": [[0, 2, -1], [4, -1, -1]],
        "accept_num": [1, 0],
    },
}


@pytest.fixture(scope="module")
def verified_trees(runtime):
    result = runtime.run(f"CASES = {VERIFY_CASES!r}\n" + VERIFY_SCRIPT, variant=None, harness=False, timeout=300)
    assert result.returncode == 0, result.describe()
    return result.result()


@pytest.mark.parametrize("case", sorted(VERIFY_CASES))
def test_verify_tree_greedy_reference_matches_hand_worked_result(verified_trees, case):
    assert verified_trees[case] == VERIFY_EXPECTED[case]


# ---------------------------------------------------------------------------------------------
# The harness inside SGLang's own processes

WIRING_SCRIPT = (
    sglang_runtime.emit_snippet()
    + """
import ctypes, multiprocessing as mp, os


def basics():
    import torch

    libcuda = ctypes.CDLL("libcuda.so.1")  # the stub, already loaded by the harness
    torch.cuda.synchronize()  # would raise without a GPU
    return {"pid": os.getpid(), "cuda_available": torch.cuda.is_available(),
            "cuInit": libcuda.cuInit(0), "cuDeviceGet": libcuda.cuDeviceGet(None, 0)}


def probe(queue):
    import torch
    import sgl_kernel  # needs libcuda.so.1: the stub satisfies the loader
    from sglang.srt.speculative import eagle_utils
    import sglpatch_cpu_harness.tree_kernels as ref
    from sglpatch_cpu_harness import cpu_ops

    result = basics()
    # the chain case through SGLang's own wrapper: topk 1, 2 steps, 3 draft tokens, 5 verified
    tree_mask, positions, r_index, r_next, r_sib, draft_tokens = (
        eagle_utils.build_tree_kernel_efficient(
            torch.tensor([7]), torch.tensor([[-1, 0]]), torch.tensor([[0, 1]]),
            torch.tensor([[8, 9]]), torch.tensor([5]), 5, 1, 2, 3))
    if hasattr(eagle_utils, "sgl_build_tree_kernel_efficient"):  # 0.5.9: bound into eagle_utils
        from sglang.srt.speculative import eagle_info

        build_bound = eagle_utils.sgl_build_tree_kernel_efficient is ref.build_tree_kernel_efficient
        verify_bound = (eagle_info.verify_tree_greedy_func is eagle_utils.verify_tree_greedy_func
                        and eagle_utils.verify_tree_greedy_func.__module__ == "sglpatch_cpu_harness")
    else:  # 0.5.23: sgl_kernel's CPU ops, which the CUDA build of sgl-kernel lacks
        build_bound = sgl_kernel.build_tree_kernel_efficient_cpu is cpu_ops.build_tree_kernel_efficient_cpu
        verify_bound = sgl_kernel.verify_tree_greedy_cpu is cpu_ops.verify_tree_greedy_cpu
    result.update({
        "build_bound": build_bound,
        "verify_bound": verify_bound,
        "positions": positions.tolist(),
        "next_token": r_next.tolist(),
        "draft_tokens": draft_tokens.tolist(),
        "mask": [int(x) for x in tree_mask.tolist()],
    })
    queue.put(result)


if __name__ == "__main__":
    main = basics()
    ctx = mp.get_context("spawn")  # as SGLang starts its scheduler and detokenizer
    queue = ctx.Queue()
    child = ctx.Process(target=probe, args=(queue,))
    child.start()
    spawned = queue.get(timeout=240)
    child.join()
    emit({"main": main, "spawned": spawned})
"""
)


@cpu_only
def test_harness_is_active_in_sglang_and_in_spawned_processes(runtime):
    result = runtime.run(WIRING_SCRIPT, variant="pristine", timeout=400)
    assert result.returncode == 0, result.describe()
    main, spawned = result.result()["main"], result.result()["spawned"]
    assert main["pid"] != spawned["pid"]
    for probe in (main, spawned):
        assert probe["cuda_available"] is False
        assert probe["cuInit"] == probe["cuDeviceGet"] == 100  # CUDA_ERROR_NO_DEVICE (stub)
    # in the spawned process (like SGLang's scheduler) SGLang's own tree code uses the references
    assert spawned["build_bound"] and spawned["verify_bound"]
    assert spawned["positions"] == [5, 6, 7]
    assert spawned["next_token"] == [[1, 2, -1]]
    assert spawned["draft_tokens"] == [7, 8, 9]
    assert spawned["mask"] == BUILD_EXPECTED["chain"]["mask"]


@cpu_only
def test_without_the_harness_sglang_kernels_cannot_load(runtime):
    """The negative control of the harness itself: the same import fails without the stub."""
    result = runtime.run("import sgl_kernel\n", variant="pristine", harness=False, timeout=300)
    assert result.returncode != 0
    assert "libcuda.so.1" in result.stderr
