"""Qwen-Image-Edit references for loom's parity tests (issue 41): tiny random Edit and Edit-2509
pipeline folders made here with diffusers and transformers, never downloaded.

Called by make_reference.py after qwen_reference.build_pipeline. Writes under OUT:
  qwen_edit_tokenizer/  zimage_reference.py's Qwen2 tokenizer with Qwen2.5-VL's vision specials;
  qwenimage_edit/       a QwenImageEditPipeline folder: the tiny transformer and VAE of
                        qwenimage/, a Qwen2.5-VL text encoder with a 2-block vision tower
                        (windows of 2 x 2 merge groups, the second block full attention) and a
                        Qwen2VLProcessor (PIL backend) capped at 12544 pixels;
  qwenimage_edit_plus/  the same components as a QwenImageEditPlusPipeline folder;
and cases:
  pil_resize.*          uint8 images resized by PIL (bilinear, bicubic, Lanczos; up and down);
  qwen_vision.*         the processor's pixel values and grids for two images of other sizes, and
                        the vision tower's merged tokens for both at once;
  qwenimage_transformer_controls.*  the transformer over an image and two control grids;
  qwenimage_edit_prompts.*, qwenimage_edit_plus_prompts.*  encode_prompt with control images;
  qwenimage_edit_pipeline.*, qwenimage_edit_plus_pipeline.*  seeded images, true CFG.
The text encoder is given the processor's mm_token_type_ids, as transformers 5 needs them for
the image tokens' multimodal positions; diffusers 0.42.1 does not pass them (its issue #14194).
"""
import json
import os

import numpy as np
import torch
from PIL import Image

from reference_cases import save_case
from qwen_reference import (perturb_, pipeline_text_encoder_config, qwenimage_scheduler,
                            qwenimage_vae)

VISION_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
MAX_PIXELS = 12544
PROMPTS = ["make the cat blue", "Picture 1 in the style of a watercolour, at sunset"]
NEGATIVE = "blurry"


def random_image(g, width, height):
    return Image.fromarray(torch.randint(0, 256, (height, width, 3), generator=g,
                                         dtype=torch.uint8).numpy())


def as_tensor(image):
    return torch.from_numpy(np.array(image)).contiguous()


def pil_resize_case(cases, g):
    inputs, expected = {}, {}
    filters = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
    sizes = [((37, 23), (64, 48)), ((64, 48), (21, 17)), ((50, 40), (50, 13)),
             ((33, 29), (90, 29))]
    for i, (src, dst) in enumerate(sizes):
        image = random_image(g, *src)
        inputs[f"image_{i}"] = as_tensor(image)
        for name, f in filters.items():
            expected[f"{name}_{i}"] = as_tensor(image.resize(dst, resample=f))
    save_case(cases, "pil_resize", inputs, expected)
    with open(os.path.join(cases, "pil_resize.json"), "w") as f:
        json.dump({"sizes": sizes}, f)


def build_tokenizer(out):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(out, "qwen2_tokenizer"))
    tokenizer.add_special_tokens({"additional_special_tokens": VISION_SPECIALS})
    tokenizer.save_pretrained(os.path.join(out, "qwen_edit_tokenizer"))
    return AutoTokenizer.from_pretrained(os.path.join(out, "qwen_edit_tokenizer"))


def text_encoder(tokenizer, g):
    from transformers import Qwen2_5_VLForConditionalGeneration

    ids = tokenizer.convert_tokens_to_ids(VISION_SPECIALS)
    config = pipeline_text_encoder_config(
        len(tokenizer), dict(depth=2, window_size=56, fullatt_block_indexes=[1]),
        vision_start_token_id=ids[0], vision_end_token_id=ids[1], image_token_id=ids[2],
        video_token_id=ids[3])
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    perturb_(model, g)
    # Give the image tokens their multimodal positions (see the module's docstring).
    forward = model.forward

    def with_token_types(input_ids=None, **kwargs):
        if input_ids is not None and kwargs.get("mm_token_type_ids") is None:
            kwargs["mm_token_type_ids"] = (input_ids == config.image_token_id).int()
        return forward(input_ids=input_ids, **kwargs)

    model.forward = with_token_types
    return model


def processor(tokenizer):
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    # Without torchvision there is no video processor; images need none, so the processor is
    # made of the other two (saved, and read back by diffusers, as a Qwen2VLProcessor).
    class ImageOnlyProcessor(Qwen2VLProcessor):
        @classmethod
        def get_attributes(cls):
            return ["image_processor", "tokenizer"]

    ImageOnlyProcessor.__name__ = ImageOnlyProcessor.__qualname__ = "Qwen2VLProcessor"
    ImageOnlyProcessor.__module__ = Qwen2VLProcessor.__module__
    image_processor = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=MAX_PIXELS)
    return ImageOnlyProcessor(image_processor, tokenizer, None)


def vision_case(cases, model, proc, g):
    images = [random_image(g, 150, 100), random_image(g, 60, 90)]
    inputs, expected = {}, {}
    pixel_values, grids = [], []
    for i, image in enumerate(images):
        o = proc.image_processor(images=image, return_tensors="pt")
        inputs[f"image_{i}"] = as_tensor(image)
        expected[f"pixel_values_{i}"] = o["pixel_values"]
        expected[f"grid_{i}"] = o["image_grid_thw"][0]
        pixel_values.append(o["pixel_values"])
        grids.append(o["image_grid_thw"])
    tokens = model.model.visual(torch.cat(pixel_values), grid_thw=torch.cat(grids)).pooler_output
    expected["tokens"] = tokens
    save_case(cases, "qwen_vision", inputs, expected)


def transformer_controls_case(out, cases, g):
    from diffusers import QwenImageTransformer2DModel

    model = QwenImageTransformer2DModel.from_pretrained(
        os.path.join(out, "qwenimage_transformer")).eval()
    shapes = [(1, 4, 6), (1, 2, 3), (1, 3, 2)]
    tokens = sum(f * h * w for f, h, w in shapes)
    hidden = torch.randn(2, tokens, 64, generator=g)
    text = torch.randn(2, 7, 32, generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    timestep = torch.tensor([0.4, 0.8])
    sample = model(hidden_states=hidden, encoder_hidden_states=text,
                   encoder_hidden_states_mask=mask, timestep=timestep,
                   img_shapes=[shapes, shapes], return_dict=False)[0]
    save_case(cases, "qwenimage_transformer_controls",
              {"hidden_states": hidden, "encoder_hidden_states": text,
               "encoder_hidden_states_mask": mask, "timestep": timestep},
              {"sample": sample})


def prompts_case(cases, name, pipe, images, condition_area):
    """encode_prompt of each prompt alone (the pipelines take a batch of one with images), with
    the control images resized as the pipeline resizes them before its processor."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import calculate_dimensions

    resized = []
    for image in images:
        w, h = calculate_dimensions(condition_area, image.size[0] / image.size[1])
        resized.append(pipe.image_processor.resize(image, h, w))
    expected = {}
    for i, prompt in enumerate(PROMPTS):
        embeds, mask = pipe.encode_prompt(
            prompt=[prompt], image=resized if len(images) > 1 else resized[0], device="cpu")
        expected[f"embeds_{i}"] = embeds[0]
        if mask is not None:
            expected[f"mask_{i}"] = mask[0]
    save_case(cases, name, {f"image_{i}": as_tensor(im) for i, im in enumerate(images)},
              expected)


def pipeline_case(cases, name, pipe, images):
    seed = 21
    result = pipe(image=images if len(images) > 1 else images[0], prompt=PROMPTS[0],
                  negative_prompt=NEGATIVE, true_cfg_scale=4.0, height=32, width=48,
                  num_inference_steps=2, output_type="pt",
                  generator=torch.Generator().manual_seed(seed)).images
    save_case(cases, name, {f"image_{i}": as_tensor(im) for i, im in enumerate(images)},
              {"images": result})
    with open(os.path.join(cases, f"{name}.json"), "w") as f:
        json.dump({"prompt": PROMPTS[0], "negative": NEGATIVE, "seed": seed, "height": 32,
                   "width": 48, "steps": 2, "guidance": 4.0, "images": len(images)}, f)


@torch.no_grad()
def build(out, cases):
    from diffusers import (QwenImageEditPipeline, QwenImageEditPlusPipeline,
                           QwenImageTransformer2DModel)

    g = torch.Generator().manual_seed(47)
    pil_resize_case(cases, g)
    tokenizer = build_tokenizer(out)
    encoder = text_encoder(tokenizer, g)
    proc = processor(tokenizer)
    vision_case(cases, encoder, proc, g)
    transformer_controls_case(out, cases, g)
    transformer = QwenImageTransformer2DModel.from_pretrained(
        os.path.join(out, "qwenimage_transformer")).eval()
    vae = qwenimage_vae(g)
    parts = dict(scheduler=qwenimage_scheduler(), vae=vae, text_encoder=encoder,
                 tokenizer=tokenizer, processor=proc, transformer=transformer)
    edit = QwenImageEditPipeline(**parts)
    edit.save_pretrained(os.path.join(out, "qwenimage_edit"), safe_serialization=True)
    plus = QwenImageEditPlusPipeline(**parts)
    plus.save_pretrained(os.path.join(out, "qwenimage_edit_plus"), safe_serialization=True)
    control = random_image(g, 40, 30)
    second = random_image(g, 24, 36)
    prompts_case(cases, "qwenimage_edit_prompts", edit, [control], 1024 * 1024)
    prompts_case(cases, "qwenimage_edit_plus_prompts", plus, [control, second], 384 * 384)
    pipeline_case(cases, "qwenimage_edit_pipeline", edit, [control])
    pipeline_case(cases, "qwenimage_edit_plus_pipeline", plus, [control, second])
