"""Packed scoring (mirl.policy.packing): same numbers as right-padded micro-batches, fewer positions computed."""

import pytest
import torch

from mirl.policy.packing import pack, packed_inputs
from mirl.policy.tiny import tiny_policy, tiny_tokenizer


def test_pack_respects_capacity_and_keeps_every_item():
    lengths = [5, 3, 4, 2, 9, 1, 1]
    rows = pack(lengths, capacity=7)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    for row in rows:
        assert len(row) == 1 or sum(lengths[i] for i in row) <= 7  # the 9 gets a row of its own
    assert [4] in rows


def test_packed_mask_blocks_other_continuations():
    _, pos, mask, pred = packed_inputs([[1, 2, 3], [4, 5]], prefix_len=3, dtype=torch.float32, device="cpu")
    allowed = mask[0, 0] == 0  # (5, 8)
    assert pos.tolist() == [[3, 4, 5, 3, 4]] and pred.tolist() == [0, 1, 2, 0, 4]
    assert allowed[:, :3].all()  # the prefix is visible to every token
    assert not allowed[3, 3:6].any() and not allowed[1, 6:].any()  # never another continuation's tokens
    assert allowed[4, 6:].tolist() == [True, True]


@pytest.mark.parametrize("capacity", [8, 64, 4096])
def test_packed_scores_equal_padded_scores(capacity):
    policy = tiny_policy(seed=2)
    g = torch.Generator().manual_seed(1)
    vocab = len(tiny_tokenizer())
    short, long = (torch.randint(3, vocab, (n,), generator=g).tolist() for n in (3, 25))
    prefixes = [short, long, short, long, short, long, short]
    lengths = [1, 40, 7, 3, 19, 12, 7]
    conts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    conts[6] = list(conts[2])  # an identical (prefix, continuation) cell
    conts.append([])
    prefixes.append(short)
    policy.pack_scoring = False
    padded = policy.score(prefixes, conts)
    policy.pack_scoring, policy.max_packed_tokens = True, capacity
    packed = policy.score(prefixes, conts)
    for a, b, cont in zip(packed, padded, conts, strict=True):
        assert a.shape == (len(cont),) and a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
