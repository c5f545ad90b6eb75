"""The course's decoder-only model configured as Llama computes what the reference implementation
learners meet next computes: Hugging Face transformers' ``LlamaForCausalLM``, built from a small
random ``LlamaConfig`` (nothing downloaded), its weights converted by ``DecoderOnlyLM.from_llama``.

In float64 the two agree to about 2e-5 on logits of size 8, not 1e-15: the reference computes
RoPE's angles and normalises inside its RMSNorm in float32, whatever the model's dtype, and three
layers amplify that rounding. The tolerance below (1e-4) is far under any real difference: the
RoPE pairs in the wrong layout change the logits by more than 0.01 (checked below).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM  # the test extra installs it

import d2lhelpers as d2lh

V = 61
# transformers 5 calls the cache argument and output ``cache``; earlier versions ``past_key_values``
CACHE = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters \
    else "past_key_values"
TOL = {"atol": 1e-4, "rtol": 1e-5}


def reference(num_kv_heads: int, tie: bool, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=V, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=num_kv_heads,
                         max_position_embeddings=128, rms_norm_eps=1e-6,
                         tie_word_embeddings=tie, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).double().eval()
    with torch.no_grad():  # the default init is tiny (std 0.02): make every piece matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.3)
    return model


def ours(ref: LlamaForCausalLM) -> d2lh.DecoderOnlyLM:
    return d2lh.DecoderOnlyLM.from_llama(ref.config, ref.state_dict())


CASES = [(4, False), (2, False), (1, True), (2, True)]  # MHA, GQA, MQA; separate and tied


@pytest.mark.parametrize("num_kv_heads, tie", CASES)
@pytest.mark.parametrize("length", [1, 7, 40])
def test_logits_equal_the_reference(num_kv_heads, tie, length):
    ref = reference(num_kv_heads, tie)
    model = ours(ref)
    assert model.blocks[0].attention.num_kv_heads == num_kv_heads
    assert (model.output.weight is model.embedding.weight) == tie
    tokens = torch.randint(V, (3, length))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), ref(tokens).logits, **TOL)


@pytest.mark.parametrize("num_kv_heads, tie", CASES)
def test_logits_one_token_at_a_time_with_both_caches_equal_the_reference(num_kv_heads, tie):
    ref = reference(num_kv_heads, tie)
    model = ours(ref)
    tokens = torch.randint(V, (2, 12))
    state, past = model.init_state(), None
    with torch.no_grad():
        for t in range(0, 12, 3):  # a prompt of 3, then chunks of 3, then single tokens
            chunk = tokens[:, t:t + 3] if t < 6 else tokens[:, t:t + 1]
            out = ref(chunk, use_cache=True, **{CACHE: past})
            past = getattr(out, CACHE)
            torch.testing.assert_close(model.step(chunk, state), out.logits, **TOL)
        assert state.num_decoded == past.get_seq_length()


@pytest.mark.parametrize("num_kv_heads, tie", CASES)
def test_greedy_generation_equals_the_references(num_kv_heads, tie):
    ref = reference(num_kv_heads, tie, seed=1)
    model = ours(ref)
    prompt = torch.randint(V, (2, 5))
    theirs = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16,
                          do_sample=False, eos_token_id=None, pad_token_id=0)[:, prompt.shape[1]:]
    for use_cache in (True, False):
        mine = d2lh.generate(model, prompt, 16, temperature=0.0, use_cache=use_cache)
        assert torch.equal(mine, theirs)


def test_the_conversion_goes_back_and_forth_and_a_wrong_layout_would_show():
    ref = reference(2, False)
    model = ours(ref)
    back = model.llama_state_dict()
    expected = {k: v for k, v in ref.state_dict().items() if not k.endswith("inv_freq")}
    assert back.keys() == expected.keys()
    for name in expected:
        assert torch.equal(back[name], expected[name]), name
    # Without the reordering of RoPE's pairs, the logits differ by far more than the tolerance.
    naive = d2lh.DecoderOnlyLM.from_llama(ref.config, ref.state_dict())
    with torch.no_grad():
        for block in naive.blocks:
            for layer in (block.attention.W_q, block.attention.W_k):
                d_k = block.attention.d_k
                undo = torch.argsort(d2lh.llama_rope_permutation(d_k))
                layer.weight.copy_(layer.weight.unflatten(0, (-1, d_k))[:, undo].flatten(0, 1))
        tokens = torch.randint(V, (2, 9))
        assert (naive(tokens) - ref(tokens).logits).abs().max() > 0.01


def test_rope_permutation_pairs_llamas_halves_into_neighbours():
    assert d2lh.llama_rope_permutation(6).tolist() == [0, 3, 1, 4, 2, 5]
    x = torch.randn(2, 5, 8, dtype=torch.float64)  # (B, T, d_k), Llama's layout
    cos_sin = torch.arange(5.0, dtype=torch.float64)[:, None] * d2lh.rotary_frequencies(
        8, dtype=torch.float64)  # (T, d_k/2)
    cos, sin = torch.cat([cos_sin.cos()] * 2, -1), torch.cat([cos_sin.sin()] * 2, -1)
    rotate_half = torch.cat([-x[..., 4:], x[..., :4]], dim=-1)
    theirs = x * cos + rotate_half * sin  # the reference's rotation, written out
    perm = d2lh.llama_rope_permutation(8)
    ours_ = d2lh.apply_rotary(x[..., perm], torch.arange(5))
    torch.testing.assert_close(ours_, theirs[..., perm])


def test_a_configuration_this_architecture_lacks_is_refused():
    config = reference(2, False).config
    state = reference(2, False).state_dict()
    for field, value, seen in [("attention_bias", True, "True"), ("hidden_act", "gelu", "'gelu'"),
                               ("head_dim", 16, "16")]:
        changed = LlamaConfig(**{**config.to_dict(), field: value})
        with pytest.raises(ValueError, match=rf"^config.{field} must be .*, got {seen}$"):
            d2lh.DecoderOnlyLM.from_llama(changed, state)
    with pytest.raises(ValueError, match="missing .*model.norm.weight"):
        d2lh.DecoderOnlyLM.from_llama(config, {k: v for k, v in state.items()
                                               if k != "model.norm.weight"})
