"""ComfyUI's LoRA key map, as comfy/lora.py defines it, for the models loom trains: which keys of
a LoRA file ComfyUI's LoraLoaderModelOnly (comfy.sd.load_lora_for_models) would apply, without
ComfyUI installed (it is not on PyPI, and its loader needs its own model classes).

What is written out here, from comfy/lora.py (ComfyUI 41444b5):
  model_lora_keys_unet — for every weight "diffusion_model.<K>.weight" of ComfyUI's own model:
      "lora_unet_<K with '.' -> '_'>" and "diffusion_model.<K>" (the generic format);
    for a UNet, for every diffusers weight key <D> (comfy.utils.unet_to_diffusers covers them all):
      "lora_unet_<D with '.' -> '_'>", "lycoris_<same>", and "<D>" / "unet.<D>" with
      ".to_" -> ".processor.to_" and a final ".to_out.0" cut to ".to_out";
    for Flux: "transformer.<D>" for the diffusers keys of comfy.utils.flux_to_diffusers (the
      double- and single-stream blocks' Linears).
  load_lora — a mapped stem X is loaded from "X.lora_up.weight" / "X.lora_down.weight",
      "X_lora.up.weight" / "X_lora.down.weight", "X.lora_B.weight" / "X.lora_A.weight",
      "X.lora.up.weight" / "X.lora.down.weight" or "X.lora_linear_layer.up/down.weight", with
      "X.alpha"; every other key is "lora key not loaded".

ComfyUI's own weight names: a UNet's are the original (ldm) ones, reached from diffusers' names
through unet_to_diffusers, so the UNet map is built from diffusers' names directly; Wan's are the
original Wan checkpoint's (comfy/ldm/wan/model.py), found here by diffusers' own single-file
converter (convert_wan_transformer_to_diffusers): the original name of a diffusers module is the
one that converter turns into it.
"""

import re

# load_lora's (up, down) suffix pairs, in its order.
SUFFIXES = [(".lora_up.weight", ".lora_down.weight"),
            ("_lora.up.weight", "_lora.down.weight"),
            (".lora_B.weight", ".lora_A.weight"),
            (".lora.up.weight", ".lora.down.weight"),
            (".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight")]

# comfy.utils.flux_to_diffusers: the block Linears it maps from diffusers' names.
FLUX_DOUBLE = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj",
               "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out", "norm1.linear",
               "norm1_context.linear", "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj",
               "ff_context.net.2"}
FLUX_SINGLE = {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", "proj_out", "norm.linear"}


def _weighted_modules(module):
    """Names of `module`'s submodules that have a weight of two or more dimensions."""
    return [name for name, m in module.named_modules()
            if getattr(m, "weight", None) is not None and m.weight.dim() >= 2]


def generic_stems(comfy_names):
    """The stems model_lora_keys_unet maps for ComfyUI weights "diffusion_model.<K>.weight",
    given as the names <K>."""
    stems = set()
    for k in comfy_names:
        stems.add("lora_unet_" + k.replace(".", "_"))
        stems.add("diffusion_model." + k)
    return stems


def unet_stems(unet):
    """The stems ComfyUI maps for a diffusers UNet2DConditionModel's modules."""
    stems = set()
    for d in _weighted_modules(unet):
        stems.add("lora_unet_" + d.replace(".", "_"))
        stems.add("lycoris_" + d.replace(".", "_"))
        processor = d.replace(".to_", ".processor.to_")
        if processor.endswith(".to_out.0"):
            processor = processor[:-2]
        stems.add(processor)
        stems.add("unet." + processor)
    # SDXL's added-condition embedding is ComfyUI's label_emb.0.0 / 0.2, whose generic
    # lora_unet_ names are the ones kohya writes for it.
    if hasattr(unet, "add_embedding"):
        stems |= {"lora_unet_label_emb_0_0", "lora_unet_label_emb_0_2"}
    return stems


def flux_stems(transformer):
    stems = set()
    for d in _weighted_modules(transformer):
        parts = d.split(".", 2)
        if len(parts) == 3 and parts[1].isdigit():
            table = {"transformer_blocks": FLUX_DOUBLE,
                     "single_transformer_blocks": FLUX_SINGLE}.get(parts[0], set())
            if parts[2] in table:
                stems.add("transformer." + d)
    return stems


# The original Wan checkpoint's names for a diffusers WanTransformer3DModel block's Linears: each
# candidate is checked below against diffusers' converter, so a wrong row here fails loudly.
_WAN_ORIGINAL = [("attn1.to_q", "self_attn.q"), ("attn1.to_k", "self_attn.k"),
                 ("attn1.to_v", "self_attn.v"), ("attn1.to_out.0", "self_attn.o"),
                 ("attn2.to_q", "cross_attn.q"), ("attn2.to_k", "cross_attn.k"),
                 ("attn2.to_v", "cross_attn.v"), ("attn2.to_out.0", "cross_attn.o"),
                 ("attn2.add_k_proj", "cross_attn.k_img"),
                 ("attn2.add_v_proj", "cross_attn.v_img"),
                 ("ffn.net.0.proj", "ffn.0"), ("ffn.net.2", "ffn.2")]


def wan_comfy_names(transformer):
    """ComfyUI's names (the original Wan checkpoint's) of a WanTransformer3DModel's block
    Linears, each confirmed by diffusers' single-file converter."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    names = []
    for d in _weighted_modules(transformer):
        m = re.match(r"blocks\.(\d+)\.(.+)$", d)
        if not m:
            continue
        original = next((o for dn, o in _WAN_ORIGINAL if dn == m.group(2)), None)
        if original is None:
            continue
        name = f"blocks.{m.group(1)}.{original}"
        back = convert_wan_transformer_to_diffusers({name + ".weight": 0})
        assert list(back) == [d + ".weight"], f"{name} converts to {list(back)}, not {d}"
        names.append(name)
    return names


def loaded_keys(tensors, stems):
    """(keys load_lora applies, keys it reports as "lora key not loaded") of a LoRA file's keys
    `tensors` under the key map `stems`."""
    loaded = set()
    for stem in stems:
        for up, down in SUFFIXES:
            if stem + up in tensors:
                loaded |= {stem + up, stem + down}
                if stem + ".alpha" in tensors:
                    loaded.add(stem + ".alpha")
                break
    loaded &= set(tensors)
    return sorted(loaded), sorted(set(tensors) - loaded)


def stems_for(pipe):
    """The key map of the denoiser of a diffusers pipeline loom trains, by its class."""
    name = type(pipe).__name__
    if hasattr(pipe, "unet") and pipe.unet is not None:
        return unet_stems(pipe.unet)
    if name in ("FluxPipeline", "FluxKontextPipeline"):
        return flux_stems(pipe.transformer)
    if name == "WanPipeline":
        stems = generic_stems(wan_comfy_names(pipe.transformer))
        if getattr(pipe, "transformer_2", None) is not None:
            stems |= generic_stems(wan_comfy_names(pipe.transformer_2))
        return stems
    raise ValueError(f"no ComfyUI key map written out here for {name}")
