#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference outputs of diffusers' own FluxTransformer2DModel at a tiny configuration, for
tests/data/flux_tiny_reference.bin (read by tests/runner/flux_test.cpp). Not run in CI.

    tools/flux_reference.py DIFFUSERS_SRC [OUT.bin]

DIFFUSERS_SRC is the src/ folder of the unpacked diffusers tarball (../shared/third_party/
diffusers-58eb52c.tar.gz). Runs on the CPU in float32 with Debian's python3-torch 1.13 and
python3-numpy (apt-get install python3-torch python3-numpy; run it with /usr/bin/python3): no
network, no pip.

What runs is diffusers' code itself: models/activations.py, embeddings.py, normalization.py,
attention.py (FeedForward) and transformers/transformer_flux.py (FluxTransformer2DModel,
FluxTransformerBlock, FluxSingleTransformerBlock, FluxAttention, FluxAttnProcessor, FluxPosEmbed)
are executed from DIFFUSERS_SRC. The rest of the package (configuration, loaders, hooks, the
Hugging Face Hub client) is not importable here and is not on the forward's path, so small stand-
ins take its place (stub_package below). Two shims fill torch >= 2 features torch 1.13 lacks:
torch.nn.RMSNorm (x * rsqrt(mean(x^2) + eps) * weight, as torch 2.4 defines it) and the attention
backend (dispatch_attention_fn: softmax(q k^T / sqrt(d)) v over (batch, seq, heads, dim), the
math of F.scaled_dot_product_attention without a mask).

The weights and inputs come from a seeded generator the C++ test reproduces
(examples/flux/flux_init.hpp): for a tensor NAME and element i (row-major),
    key = fnv1a64(NAME) xor SEED;  r = splitmix64(key + i)  (mod 2^64);
    u = (r >> 40) * 2^-23 - 1                                 (in [-1, 1), 24 bits: exact in float32)
    linear weight [out, in]: u / sqrt(in);  linear bias: u / 16;  RMSNorm weight: 1 + u / 4
    inputs (hidden_states, encoder_hidden_states, pooled_projections): u
each computed in float64 and rounded once to float32. The schedule is FLUX.1-dev's: sigmas
linspace(1, 1/N, N) in float32, mu = calculate_shift(image tokens) with (256, 4096, 0.5, 1.15),
sigma' = e^mu / (e^mu + 1/sigma - 1), a final 0; the pipeline hands the transformer
timestep = (1000 sigma) / 1000 in float32 (it multiplies by 1000 inside) and guidance 3.5; Euler: x += (sigma' - sigma) v.

The output file (little-endian): magic b"DDOFLUX1", then uint32 count of float32 arrays, then
per array uint32 element count and the elements: [0] the transformer's output at the first
sigma for the seeded inputs (image tokens x 64), [1] the latents after N_STEPS Euler steps.
"""

import importlib.util
import math
import struct
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F

SEED = 25
CONFIG = dict(
    patch_size=1,
    in_channels=64,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=64,
    num_attention_heads=2,
    joint_attention_dim=96,
    pooled_projection_dim=48,
    guidance_embeds=True,
    axes_dims_rope=(8, 28, 28),
)
IMAGE_SIDE = 8  # 8 x 8 = 64 packed image tokens (a 128 x 128 px image)
TEXT_TOKENS = 16
N_STEPS = 2
GUIDANCE = 3.5


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def uniform(name, count):
    """u in [-1, 1) for elements 0..count-1 of NAME (see the file comment)."""
    with np.errstate(over="ignore"):
        x = np.uint64(fnv1a64(name) ^ SEED) + np.arange(count, dtype=np.uint64)
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) * 2.0**-23 - 1.0


def tensor_value(name, shape):
    u = uniform(name, int(np.prod(shape)))
    if name.endswith(".bias"):
        v = u / 16.0
    elif "norm" in name.split(".")[-2] and len(shape) == 1:
        v = 1.0 + u / 4.0
    elif len(shape) == 2:
        v = u / math.sqrt(shape[1])
    else:
        raise ValueError(f"no generator rule for {name} {shape}")
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


# --- diffusers' modules, with stand-ins for what the forward never touches --------------------


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm (torch >= 2.4), as it computes for a float32 input."""

    def __init__(self, dim, eps=None, elementwise_affine=True):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim)) if elementwise_affine else None

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y * self.weight if self.weight is not None else y


def dispatch_attention_fn(query, key, value, attn_mask=None, **_):
    """Attention over (batch, seq, heads, dim), the math of F.scaled_dot_product_attention."""
    assert attn_mask is None
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)


def stub_package(name, **attrs):
    module = types.ModuleType(name)
    module.__path__ = []
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def load_real(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_diffusers(src):
    torch.nn.RMSNorm = RMSNorm
    if not hasattr(F, "scaled_dot_product_attention"):
        F.scaled_dot_product_attention = lambda *a, **k: None  # presence checks only; unused

    class Logger:
        def __getattr__(self, _):
            return lambda *a, **k: None

    identity = lambda f: f  # noqa: E731
    mixin = lambda name: type(name, (), {})  # noqa: E731  (distinct bases: one class lists five)
    dummy = type("Dummy", (), {"__init__": lambda self, *a, **k: None})
    logging = types.SimpleNamespace(get_logger=lambda *_: Logger())
    stub_package("diffusers")
    stub_package(
        "diffusers.utils",
        deprecate=lambda *a, **k: None,
        logging=logging,
        is_torch_npu_available=lambda: False,
        is_torch_version=lambda *a: False,
        apply_lora_scale=lambda *_: identity,
        BaseOutput=object,
    )
    stub_package("diffusers.utils.import_utils", is_torch_npu_available=lambda: False,
                 is_torch_xla_available=lambda: False, is_xformers_available=lambda: False,
                 is_torch_version=lambda *a: False)
    stub_package("diffusers.utils.torch_utils", maybe_allow_in_graph=identity,
                 maybe_adjust_dtype_for_device=lambda dtype, device: dtype)
    stub_package("diffusers.models")
    stub_package("diffusers.models.attention_processor", Attention=dummy, AttentionProcessor=dummy,
                 JointAttnProcessor2_0=dummy)
    stub_package("diffusers.models.attention_dispatch", dispatch_attention_fn=dispatch_attention_fn)
    stub_package("diffusers.configuration_utils", ConfigMixin=mixin("ConfigMixin"), register_to_config=identity)
    stub_package("diffusers.hooks")
    stub_package("diffusers.hooks.tensor_parallel", PackedRowwiseParallel=dummy)
    stub_package("diffusers.loaders", FluxTransformer2DLoadersMixin=mixin("L"),
                 FromOriginalModelMixin=mixin("F"), PeftAdapterMixin=mixin("P"))
    stub_package("diffusers.models._modeling_parallel", ContextParallelInput=dummy,
                 ContextParallelOutput=dummy)
    stub_package("diffusers.models.cache_utils", CacheMixin=mixin("CacheMixin"))
    stub_package("diffusers.models.modeling_outputs", Transformer2DModelOutput=dummy)
    stub_package("diffusers.models.modeling_utils", ModelMixin=torch.nn.Module)
    stub_package("diffusers.models.transformers")
    models = src + "/diffusers/models/"
    for name in ("activations", "embeddings", "normalization", "attention"):
        load_real("diffusers.models." + name, models + name + ".py")
    return load_real("diffusers.models.transformers.transformer_flux",
                     models + "transformers/transformer_flux.py")


def calculate_shift(image_seq_len, base_seq_len=256, max_seq_len=4096, base_shift=0.5,
                    max_shift=1.15):
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_seq_len * m + (base_shift - m * base_seq_len)


def sigmas_for(steps, image_tokens):
    sigmas = np.linspace(1.0, 1.0 / steps, steps).astype(np.float32)
    mu = calculate_shift(image_tokens)
    shifted = math.exp(mu) / (math.exp(mu) + (1.0 / sigmas - 1.0) ** 1.0)
    return list(torch.from_numpy(shifted.astype(np.float32)).tolist()) + [0.0]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_path = sys.argv[2] if len(sys.argv) > 2 else "flux_tiny_reference.bin"
    flux = load_diffusers(sys.argv[1])
    torch.manual_seed(0)
    model = flux.FluxTransformer2DModel(**CONFIG).eval()
    state = {name: tensor_value(name, tuple(p.shape)) for name, p in model.state_dict().items()}
    model.load_state_dict(state)

    n_img = IMAGE_SIDE * IMAGE_SIDE
    c = CONFIG
    latents = torch.from_numpy(uniform("input.hidden_states", n_img * c["in_channels"])
                               .astype(np.float32).reshape(1, n_img, c["in_channels"]))
    text = torch.from_numpy(uniform("input.encoder_hidden_states",
                                    TEXT_TOKENS * c["joint_attention_dim"])
                            .astype(np.float32).reshape(1, TEXT_TOKENS, c["joint_attention_dim"]))
    pooled = torch.from_numpy(uniform("input.pooled_projections", c["pooled_projection_dim"])
                              .astype(np.float32).reshape(1, -1))
    img_ids = torch.zeros(IMAGE_SIDE, IMAGE_SIDE, 3)
    img_ids[..., 1] += torch.arange(IMAGE_SIDE)[:, None]
    img_ids[..., 2] += torch.arange(IMAGE_SIDE)[None, :]
    img_ids = img_ids.reshape(n_img, 3)
    txt_ids = torch.zeros(TEXT_TOKENS, 3)
    guidance = torch.full([1], GUIDANCE, dtype=torch.float32)

    sigmas = sigmas_for(N_STEPS, n_img)
    # The scheduler's timesteps are sigma * 1000; the pipeline hands the transformer t / 1000.
    timesteps = torch.tensor(sigmas[:-1], dtype=torch.float32) * 1000
    outputs = []
    with torch.no_grad():
        x = latents
        for i in range(N_STEPS):
            t = timesteps[i:i + 1] / 1000
            v = model(hidden_states=x, encoder_hidden_states=text, pooled_projections=pooled,
                      timestep=t, img_ids=img_ids, txt_ids=txt_ids, guidance=guidance,
                      return_dict=False)[0]
            if i == 0:
                outputs.append(v)
            x = (x.float() + (sigmas[i + 1] - sigmas[i]) * v.float()).to(v.dtype)
        outputs.append(x)
    with open(out_path, "wb") as f:
        f.write(b"DDOFLUX1" + struct.pack("<I", len(outputs)))
        for a in outputs:
            flat = a.detach().contiguous().reshape(-1).numpy().astype("<f4")
            f.write(struct.pack("<I", flat.size) + flat.tobytes())
    print(f"sigmas {sigmas}; wrote {out_path}: " +
          ", ".join(f"{a.numel()} values (|max| {a.abs().max().item():.4f})" for a in outputs))


if __name__ == "__main__":
    main()
