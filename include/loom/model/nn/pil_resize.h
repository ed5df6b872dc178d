#pragma once

// PIL's Image.resize, bit for bit: the convolution resampler of Pillow's Resample.c for 8-bit
// images (a separable filter whose support widens with the downscale factor, coefficients
// normalised per output pixel and rounded to 22-bit fixed point, the horizontal pass first). The
// pipelines that condition on an image resize it this way before a model sees it —
// VaeImageProcessor.resize (Lanczos) and Qwen2-VL's image processor (bicubic) — so an image
// resized here is the pixel the reference pipeline computes, not an approximation of it.
// data::resize_image stays the loader's resampler; this one is for parity with a pipeline.
//
// ref: Pillow src/libImaging/Resample.c::{precompute_coeffs, normalize_coeffs_8bpc,
//      ImagingResampleHorizontal_8bpc, ImagingResampleVertical_8bpc, ImagingResampleInner};
//      src/PIL/Image.py::Image.resize (same size: a copy)

#include <ATen/core/Tensor.h>

namespace loom {

enum class PilFilter { kBilinear, kBicubic, kLanczos };

// `image` (uint8 [H, W, 3] on the host) resized to width x height with PIL's `filter`, as a new
// uint8 [height, width, 3] tensor. Both sizes must be positive.
at::Tensor pil_resize(const at::Tensor& image, int64_t width, int64_t height, PilFilter filter);

}  // namespace loom
