#pragma once

// Images as tensors: the form the VAE takes. Tensors made here are host-resident (created inside
// a HostAllocations scope, device/host_memory.h), so loader buffers never count against the
// simulated device's budget; the trainer moves them to the device.

#include <ATen/core/Tensor.h>

#include "loom/data/bucket.h"
#include "loom/data/image.h"

namespace loom::data {

struct ImageRecord;

// float32 [3, H, W], value = byte / 127.5 - 1, so 0 -> -1 and 255 -> 1.
at::Tensor image_to_tensor(const Image& image);
// The inverse for [3, H, W] (or [1, 3, H, W]) tensors of any float dtype and device: clamped to
// [-1, 1], (v + 1) * 127.5 rounded to nearest.
Image tensor_to_image(const at::Tensor& tensor);

// What the trainer feeds the VAE for one item: the image read from disk, fitted to `bucket`
// (scale + centre crop), flipped as asked, as image_to_tensor. Throws like read_image.
at::Tensor load_item_tensor(const ImageRecord& image, BucketSize bucket, bool flip_x, bool flip_y);

}  // namespace loom::data
