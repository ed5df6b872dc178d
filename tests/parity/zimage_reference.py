"""Z-Image references for loom's parity tests (issue 42): a tiny random ZImagePipeline folder made
here with diffusers and transformers, never downloaded.

Called by make_reference.py. Writes under OUT:
  qwen2_tokenizer/  a Qwen2Tokenizer folder (tokenizer.json, tokenizer_config.json with Qwen3's
                    chat template) whose byte-level BPE is trained here on CORPUS with Qwen2's
                    pre-tokenizer; its specials after the learned tokens, as Qwen's vocabulary has
                    them. cases/qwen2_tokenizer.json: transformers' ids for every string in
                    TOKENIZER_CASES, plain and as ZImagePipeline pads them (ids and mask).
  qwen2_tokenizer_files/, qwen2_tokenizer_added_json/
                    the same tokenizer saved without tokenizer.json, as Qwen-Image's own
                    tokenizer/ folder is: vocab.json and merges.txt, the added tokens in
                    tokenizer_config.json's added_tokens_decoder (the first) or in
                    added_tokens.json with special_tokens_map.json (the second, older); the case
                    file holds transformers' ids for each as "files_ids" / "added_json_ids".
  zimage/           a ZImagePipeline folder: a tiny ZImageTransformer2DModel (2 refiner layers of
                    each kind, 2 main layers), Flux's 16-channel VAE layout with Z-Image's scale
                    and shift, a tiny Qwen3ForCausalLM as text_encoder with that tokenizer, and
                    ai-toolkit's training scheduler (shift 3, no dynamic shift);
and cases:
  zimage_transformer.*  its prediction for two latents with captions of 5 and 21 tokens (the
                        second crosses the 32-token padding the model does), t in (0, 1];
  zimage_prompts.*      ZImagePipeline.encode_prompt of three prompts (chat template, padded to
                        max_sequence_length, hidden_states[-2] of the real tokens), concatenated
                        with their lengths;
  zimage_pipeline.*     ZImagePipeline's images for two seeded prompts with a negative prompt
                        (guidance 2.5, three steps), decoded to [0, 1].
Everything is float32 on the CPU.
"""
import json
import os

import torch

from reference_cases import save_case

from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline,
                       ZImageTransformer2DModel)

PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                     r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# What Qwen3's chat template renders for one user message with add_generation_prompt and
# enable_thinking=True (the template's other branches, tools and reasoning, are not used).
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CORPUS = """
a photo of a cat sitting on the table, high quality, detailed, masterpiece, best quality
a painting of the mountains at sunset, trending on artstation, 8k, 4k, hdr, 1024x768
portrait of a beautiful woman, studio lighting, sharp focus, cinematic, photorealistic
It's a beautiful day, isn't it? They're here, we've seen it, I'm sure you'll like it, he'd go
user assistant system user assistant
café crème brûlée, naïve résumé, über straße, señor piñata
一幅为名为造相的项目设计的创意海报 东京 日本 写真 猫 犬 山 川 花 空 海
москва фото кошка собака, αθήνα φωτογραφία γάτα
🐱 🐶 😀 ❤️ 🔥 ✨
"""

TOKENIZER_CASES = [
    "",
    "a photo of a cat",
    "A Photo Of A CAT, high-quality; 8k!!",
    "IT'S they'RE we'Ve I'M you'LL he'D don't",
    "numbers 12345 and 3.14159, 1024x768",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\n\nand\r\nwindows\r\n",
    "multiple    spaces   between\n   words",
    "café crème brûlée, e\u0301 (combining), Å vs A\u030a",
    "一幅为名为造相的项目设计的创意海报，东京タワー",
    "москва фото, αθήνα, 🐱🐶 ❤️🔥",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> inside and <|im_end|>",
    "punctuation... (parens) [brackets] {braces} \"quotes\" 'single' --dash",
    "\n\n\n",
    " ",
]
PADDED_LENGTH = 24


def build_tokenizer(folder):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS.strip().split("\n") * 3, trainer)
    tok.add_special_tokens(SPECIALS)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "bos_token": None, "unk_token": None,
                   "model_max_length": 131072, "errors": "replace",
                   "split_special_tokens": False, "chat_template": CHAT_TEMPLATE}, f, indent=1)
    return AutoTokenizer.from_pretrained(folder)


def build_tokenizer_files(folder, out):
    """The tokenizer of `folder` saved as vocab.json + merges.txt (no tokenizer.json) in two
    layouts: OUT/qwen2_tokenizer_files (added_tokens_decoder in tokenizer_config.json) and
    OUT/qwen2_tokenizer_added_json (added_tokens.json and special_tokens_map.json)."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        config = json.load(f)
    added = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    loaded = []
    for name in ("qwen2_tokenizer_files", "qwen2_tokenizer_added_json"):
        target = os.path.join(out, name)
        os.makedirs(target, exist_ok=True)
        tok.model.save(target)  # vocab.json, merges.txt: the BPE without the added tokens
        mine = dict(config)
        if name == "qwen2_tokenizer_files":
            mine["added_tokens_decoder"] = {
                str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True} for c, i in added.items()}
        else:
            with open(os.path.join(target, "added_tokens.json"), "w") as f:
                json.dump(added, f, indent=1)
            with open(os.path.join(target, "special_tokens_map.json"), "w") as f:
                json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                           "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}, f)
        with open(os.path.join(target, "tokenizer_config.json"), "w") as f:
            json.dump(mine, f, indent=1)
        assert not os.path.exists(os.path.join(target, "tokenizer.json"))
        loaded.append(AutoTokenizer.from_pretrained(target))
    return loaded


def tokenizer_case(tokenizer, cases, files_tokenizers):
    plain = [tokenizer(text)["input_ids"] for text in TOKENIZER_CASES]
    padded = tokenizer(TOKENIZER_CASES, padding="max_length", max_length=PADDED_LENGTH,
                       truncation=True)
    files, added_json = ([t(text)["input_ids"] for text in TOKENIZER_CASES]
                         for t in files_tokenizers)
    with open(os.path.join(cases, "qwen2_tokenizer.json"), "w") as f:
        json.dump({"texts": TOKENIZER_CASES, "ids": plain, "max_length": PADDED_LENGTH,
                   "padded_ids": padded["input_ids"], "padded_mask": padded["attention_mask"],
                   "pad_id": tokenizer.pad_token_id, "vocab_size": len(tokenizer),
                   "files_ids": files, "added_json_ids": added_json,
                   "files_pad_ids": [t.pad_token_id for t in files_tokenizers],
                   "files_vocab_sizes": [len(t) for t in files_tokenizers]},
                  f, ensure_ascii=False, indent=1)


def perturb_(model, generator, scale=0.2):
    """Random weights of a useful size (norms near one; diffusers zero-initialises nothing the
    tiny model needs, but its pad tokens start at zero)."""
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + torch.randn(p.shape, generator=generator) * 0.1)
        else:
            p.copy_(torch.randn(p.shape, generator=generator) * scale)


def transformer(g):
    model = ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16,
                                     dim=48, n_layers=2, n_refiner_layers=2, n_heads=2,
                                     n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=32,
                                     rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 8, 8],
                                     axes_lens=[256, 64, 64]).eval()
    perturb_(model, g)
    # An output of about unit size, so that 1e-5 is float32's error on it and not less.
    model.all_final_layer["2-1"].linear.weight.mul_(0.05)
    model.all_final_layer["2-1"].linear.bias.mul_(0.05)
    return model


def text_encoder(vocab, g):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=12, rms_norm_eps=1e-6, max_position_embeddings=1024,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config).eval()
    perturb_(model, g)
    return model


def scheduler():
    # ai-toolkit's z_image.py scheduler_config (Z-Image-Turbo's own has the same shift).
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0,
                                           use_dynamic_shifting=False)


@torch.no_grad()
def build(out, cases, flux_vae):
    g = torch.Generator().manual_seed(42)
    tokenizer = build_tokenizer(os.path.join(out, "qwen2_tokenizer"))
    tokenizer_case(tokenizer, cases,
                   build_tokenizer_files(os.path.join(out, "qwen2_tokenizer"), out))
    pipe = ZImagePipeline(scheduler=scheduler(), vae=flux_vae,
                          text_encoder=text_encoder(len(tokenizer), g), tokenizer=tokenizer,
                          transformer=transformer(g))
    pipe.save_pretrained(os.path.join(out, "zimage"), safe_serialization=True)

    latents = torch.randn(2, 16, 8, 12, generator=g)
    captions = [torch.randn(5, 32, generator=g), torch.randn(21, 32, generator=g)]
    t = torch.tensor([0.3, 0.95])
    sample = pipe.transformer([x.unsqueeze(1) for x in latents], t, captions,
                              return_dict=False)[0]
    save_case(cases, "zimage_transformer",
              {"latents": latents, "caption_0": captions[0], "caption_1": captions[1],
               "timestep": t},
              {"sample": torch.stack([s.squeeze(1) for s in sample])})

    prompts = ["a photo of a cat", "It's a painting of the mountains at sunset, " * 3, ""]
    max_length = 48
    embeds, _ = pipe.encode_prompt(prompt=list(prompts), do_classifier_free_guidance=False,
                                   max_sequence_length=max_length)
    save_case(cases, "zimage_prompts", {},
              {"prompt_embeds": torch.cat(embeds),
               "lengths": torch.tensor([len(e) for e in embeds])})
    with open(os.path.join(cases, "zimage_prompts.json"), "w") as f:
        json.dump({"prompts": prompts, "max_sequence_length": max_length}, f)

    # The whole pipeline with a negative prompt: two transformer passes a step (diffusers'
    # guidance 1.5 is ai-toolkit's guidance_scale 2.5, which it lowers by one for Z-Image).
    seeds = [12, 13]
    negative = "blurry, low quality"
    images = pipe(prompt=prompts[:2], negative_prompt=[negative, negative], height=16, width=32,
                  num_inference_steps=3, guidance_scale=1.5, max_sequence_length=max_length,
                  output_type="pt",
                  generator=[torch.Generator().manual_seed(s) for s in seeds]).images
    save_case(cases, "zimage_pipeline", {}, {"images": images})
    with open(os.path.join(cases, "zimage_pipeline.json"), "w") as f:
        json.dump({"prompts": prompts[:2], "negative": negative, "seeds": seeds, "height": 16,
                   "width": 32, "steps": 3, "guidance": 2.5, "max_sequence_length": max_length},
                  f)
